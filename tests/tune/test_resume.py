"""`sweep --resume DIR`: options read back from the run folder, and those given again checked
against them (the same question written differently passes; a different one is refused)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from budgettune.artifacts.sweep_options import read_saved_options, restore_options, saved_options
from budgettune.core.errors import UserError

FLAGS = {"slo_tbt": "--slo-tbt", "trace": "--trace", "budgets": "--budgets", "env": "--env"}


def saved_folder(tmp_path: Path, options: dict) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    document = {"options": saved_options(options), "schema_version": 1}
    (run_dir / "sweep.json").write_text(json.dumps(document))
    return run_dir


def test_options_not_given_come_from_the_folder(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    original = {"slo_tbt": "46ms", "trace": trace, "budgets": "512,1024", "env": ["A=1"],
                "output": tmp_path / "run", "resume": None, "as_json": False}  # fmt: skip
    run_dir = saved_folder(tmp_path, original)
    saved = read_saved_options(run_dir)
    assert saved is not None and "output" not in saved and saved["trace"] == str(trace)
    now = {"slo_tbt": None, "trace": None, "budgets": None, "env": ["B=2"], "output": None,
           "resume": run_dir, "as_json": True}  # fmt: skip
    restored = restore_options(run_dir, saved, now, {"env", "resume", "as_json"}, FLAGS)
    # --env may change on resume (how to run, not what to ask); the question comes back
    assert restored == {**now, "slo_tbt": "46ms", "trace": trace, "budgets": "512,1024"}
    assert isinstance(restored["trace"], Path)


def test_the_same_question_written_differently_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    saved = {"slo_tbt": "46ms", "trace": str(tmp_path / "t.jsonl"), "budgets": "512,1024"}
    given = {"slo_tbt": "0.046s", "trace": Path("t.jsonl"), "budgets": "512, 1024"}
    assert restore_options(tmp_path, saved, given, set(given), FLAGS) == given


def test_a_different_question_is_refused_naming_each_option(tmp_path: Path) -> None:
    saved = {"slo_tbt": "46ms", "budgets": "512,1024", "env": ["A=1"]}
    given = {"slo_tbt": "50ms", "budgets": None, "env": ["B=2"]}
    with pytest.raises(UserError) as caught:
        restore_options(tmp_path, saved, given, set(given), FLAGS)
    assert caught.value.shown_as("--resume") == (  # the CLI shows the field as the option
        f"--resume: {tmp_path} was a sweep with --budgets 512,1024, --slo-tbt 46ms; this "
        "command gives --budgets (unset), --slo-tbt 50ms"
    )


def test_missing_folder_and_old_sweeps(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        read_saved_options(tmp_path / "nope")
    with pytest.raises(UserError, match=r"holds no sweep \(sweep.json is missing\)"):
        read_saved_options(tmp_path)
    (tmp_path / "sweep.json").write_text(json.dumps({"slo_tbt_s": 0.05, "schema_version": 1}))
    assert read_saved_options(tmp_path) is None  # saved before options were


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (None, "field 'schema_version' is missing"),
        ("1", "field 'schema_version': expected a whole number, got '1'"),
        (99, "field 'schema_version': 99 is newer than this budgettune reads (1)"),
    ],
)
def test_a_sweep_json_of_another_schema_is_refused(
    tmp_path: Path, version: object, message: str
) -> None:
    document: dict[str, object] = {"slo_tbt_s": 0.05}
    if version is not None:
        document["schema_version"] = version
    (tmp_path / "sweep.json").write_text(json.dumps(document))
    with pytest.raises(UserError) as caught:
        read_saved_options(tmp_path)
    assert caught.value.shown_as("--resume") == f"--resume: {tmp_path / 'sweep.json'}: {message}"


def test_the_request_is_what_is_saved_and_restored(tmp_path: Path) -> None:
    """sweep.json saves the SweepRequest as flat option names (the layout every sweep.json has
    used) and --resume restores the same request from them, groups and paths included."""
    from budgettune.app.requests import (
        ClientRequest,
        LaunchRequest,
        SloRequest,
        SweepRequest,
        TrafficRequest,
    )

    request = SweepRequest(
        slo=SloRequest("46ms", "1s", 90.0), profile=Path("p.json"),
        launch=LaunchRequest(engine="sim", gpu="h200", env=("A=1",), max_num_seqs="64"),
        traffic=TrafficRequest(trace=tmp_path / "t.jsonl", rate=4.0), budgets="512,1024",
        align=256, goodput=False, baseline="auto", exhaustive=True,
        max_error_rate=0.5, output=tmp_path / "run", client=ClientRequest(warmup=2),
    )  # fmt: skip
    run_dir = saved_folder(tmp_path, request.options())
    saved = read_saved_options(run_dir)
    assert (
        saved is not None
        and saved["env"] == ["A=1"]
        and saved["trace"] == str(tmp_path / "t.jsonl")
    )
    blank = {name: None for name in saved}
    restored = restore_options(run_dir, saved, {**blank, "output": None}, set(), FLAGS)
    assert SweepRequest.from_options(restored) == dataclasses.replace(request, output=None)


def test_the_example_run_folder_reads_back_as_a_request() -> None:
    """A run folder saved before SweepRequest existed (reports/example) restores one."""
    from budgettune.app.requests import SweepRequest

    example = Path(__file__).resolve().parents[2] / "reports" / "example"
    saved = read_saved_options(example)
    assert saved is not None
    request = SweepRequest.from_options(saved)
    assert request.slo.slo_tbt == saved["slo_tbt"] and request.launch.engine == saved["engine"]
    assert request.traffic.trace == Path(saved["trace"]) and request.launch.env == ()


def test_a_new_sweep_keeps_other_files_but_refuses_to_overwrite_a_sweeps(tmp_path: Path) -> None:
    from budgettune.artifacts.runfolder import create_run_folder

    beside = tmp_path / "beside"
    beside.mkdir()
    (beside / "regenerate.sh").write_text("#!/bin/sh\n")
    create_run_folder(beside, {"slo_tbt_s": 0.05})  # a script beside the sweep may stay
    assert (beside / "sweep.json").is_file() and (beside / "regenerate.sh").is_file()
    for name in ("report.html", "budget-512", "engine-512.log"):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        (folder / name).write_text("kept")
        with pytest.raises(UserError, match=f"holds {name} and no sweep; a sweep would overwrite"):
            create_run_folder(folder, {"slo_tbt_s": 0.05})
        assert (folder / name).read_text() == "kept" and not (folder / "sweep.json").exists()


HOLD_THE_FOLDER = """
import sys, time
from pathlib import Path
from budgettune.artifacts.runfolder import lock_run_folder
lock_run_folder(Path(sys.argv[1]))
print("holding", flush=True)
time.sleep(120)
"""


def test_one_process_per_run_folder(tmp_path: Path, budgettune_cmd: list[str]) -> None:
    """A second sweep in a folder another budgettune is sweeping (a new one, or --resume) is
    refused naming the first one's pid: both would measure every budget and interleave their
    points. The lock goes with the process that held it."""
    import subprocess
    import sys

    from budgettune.artifacts.runfolder import lock_run_folder

    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_FOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(UserError) as caught:
            lock_run_folder(run_dir)
        assert caught.value.field == "output"
        assert f"another budgettune (pid {holder.pid}) is running a sweep in {run_dir}" in str(
            caught.value
        )
        second = subprocess.run(
            [*budgettune_cmd, "sweep", "--engine", "sim", "--slo-tbt", "50ms", "--requests", "8",
             "--budgets", "512", "-o", str(run_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 2, second.stderr
        assert second.stderr.splitlines()[0] == (
            f"error: -o: another budgettune (pid {holder.pid}) is running a sweep in {run_dir}"
        ), second.stderr
        assert not (run_dir / "sweep.json").exists()  # nothing of the second sweep was written
        # a --resume is refused the same way, naming --resume (the saved options are not to
        # blame: it said "sweep.json: the saved --output", and that the file was damaged)
        asked = {"engine": "sim", "slo_tbt": "50ms", "requests": 8, "budgets": "512"}
        document = {"options": saved_options(asked), "schema_version": 1}
        (run_dir / "sweep.json").write_text(json.dumps(document))
        resumed = subprocess.run(
            [*budgettune_cmd, "sweep", "--resume", str(run_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert resumed.returncode == 2, resumed.stderr
        assert resumed.stderr.splitlines()[0] == (
            f"error: --resume: another budgettune (pid {holder.pid}) is running a sweep in "
            f"{run_dir}"
        ), resumed.stderr
        assert "damaged" not in resumed.stderr
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdout.close()
    lock_run_folder(run_dir)  # the holder is gone: its lock with it


def test_a_sweep_saved_with_one_max_num_seqs_number_reads_back() -> None:
    """sweep.json saved --max-num-seqs as a number before it could name several values."""
    from budgettune.app.requests import SweepRequest

    example = Path(__file__).resolve().parents[2] / "reports" / "example"
    saved = read_saved_options(example)
    assert saved is not None
    request = SweepRequest.from_options({**saved, "max_num_seqs": 64})
    assert request.launch.max_num_seqs == "64"
