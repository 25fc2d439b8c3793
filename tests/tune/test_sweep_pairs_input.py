"""--max-num-seqs with several values: what a two-knob sweep refuses before anything starts
(each with one line naming the option), and a replay, which runs one engine, taking one value."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SWEEP = ["sweep", "--engine", "sim", "--slo-tbt", "50ms", "--max-num-seqs", "4,16"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--max-num-seqs", "4,0"], "--max-num-seqs: values must be positive"),
        (["--max-num-seqs", "4,x"], "--max-num-seqs: 'x' is not a whole number"),
    ],
)
def test_a_two_knob_sweep_refuses_what_it_cannot_do(
    args: list[str], says: str, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [*budgettune_cmd, *SWEEP, *args, "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("values", ["4,16", "auto"])
def test_a_replay_takes_one_max_num_seqs(
    values: str, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [*budgettune_cmd, "replay", "--engine", "sim", "--rate", "4", "--max-num-seqs", values,
         "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"--max-num-seqs: one value here, got '{values}'" in done.stderr


def test_a_server_you_run_is_not_tuned_on_max_num_seqs(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        [*budgettune_cmd, "sweep", "--url", "http://127.0.0.1:9", "--slo-tbt", "50ms",
         "--max-num-seqs", "auto", "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--engine: a server you run has one max-num-seqs (--max-num-seqs auto)" in done.stderr
    assert not (tmp_path / "run").exists()
