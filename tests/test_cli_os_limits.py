"""What the operating system refuses ends in one line, never a traceback: a closed standard
output (`>&-`) under --json or `-o -`, and a sweep whose one request has no arrival rate is
written whole (the rate null) and found whole by --resume."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path


def _closed_stdout() -> None:
    os.close(1)


def test_a_closed_stdout_is_one_line(budgettune_cmd: list[str], tmp_path: Path) -> None:
    for argv in (
        ["simulate", "--requests", "10", "--slo-tbt", "1s", "--slo-ttft", "5s", "--json"],
        ["trace", "synth", "--rate", "1", "--requests", "3", "-o", "-"],
    ):
        done = subprocess.run(
            [*budgettune_cmd, *argv], stderr=subprocess.PIPE, text=True, timeout=120,
            cwd=tmp_path, preexec_fn=_closed_stdout,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert "standard output is closed" in done.stderr and "Traceback" not in done.stderr


def test_one_request_has_no_rate_and_the_point_is_kept(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    args = ["sweep", "--engine", "sim", "--requests", "1", "--budgets", "512", "--baseline",
            "none", "--slo-tbt", "1s", "--slo-ttft", "5s", "-o", str(run_dir)]  # fmt: skip
    done = subprocess.run([*budgettune_cmd, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "a single request" in " ".join(done.stdout.split())
    (line,) = (run_dir / "points.jsonl").read_text().splitlines()
    assert json.loads(line)["rate"] is None  # JSON holds no infinity
    assert json.loads((run_dir / "recommendation.json").read_text())["load"]["rate_per_s"] is None
    again = subprocess.run(
        [*budgettune_cmd, "sweep", "--resume", str(run_dir)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 engine launch(es)" in again.stdout  # the point was found, not measured again
