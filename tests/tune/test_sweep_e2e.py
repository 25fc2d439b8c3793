"""`budgettune sweep` end to end through the installed command on the embedded engine: the
answer against an exhaustive grid, no feasible budget, an engine that crashes or fails to start
at one budget, and resume after the sweep itself is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rising_tbt import ANSWER, SEARCH, WORKLOAD, SweepRun

pytestmark = pytest.mark.slow

# rising_tbt.WORKLOAD: with a 46 ms TBT SLO the answer is 1024, with 11+ ms of margin either side.


def sweep(cmd: list[str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "sweep", *WORKLOAD, *args], capture_output=True, text=True, timeout=timeout
    )


def recommendation(run_dir: Path) -> dict:
    return json.loads((run_dir / "recommendation.json").read_text())


def points(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]


def assert_engines_gone(run_dir: Path) -> None:
    for point in points(run_dir):
        pid = (point.get("engine") or {}).get("pid")
        if pid:
            assert not Path(f"/proc/{pid}").exists(), f"engine {pid} outlived the sweep"


@pytest.mark.timing  # the answer rests on 11+ ms of TBT margin
def test_search_matches_exhaustive_grid_with_fewer_launches(
    sequential_search: SweepRun, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    searched = sequential_search.done
    grid = subprocess.run(
        [*budgettune_cmd, "sweep", *SEARCH, "--exhaustive", "-o", str(tmp_path / "grid")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert grid.returncode == 0, grid.stderr[-3000:]

    found, truth = recommendation(sequential_search.run_dir), recommendation(tmp_path / "grid")
    assert truth["budget"] == ANSWER, [(p["budget"], p["tbt_ms"]) for p in truth["points"]]
    assert found["budget"] == truth["budget"]
    # the grid measured every candidate plus the default; the search a fraction of them
    assert truth["launches"] == 6
    assert found["launches"] <= 3
    measured = {p["budget"]: p for p in found["points"]}
    assert measured[2048]["tbt_ok"] is False, "the cliff above the answer is shown"
    predicted = measured[1024]["predicted"]
    assert 25 < predicted["tbt_at_slo_ms"] < 35  # the simulator's p99 TBT at 1024 (about 30)
    assert predicted["tbt_ms"]["p99"] == predicted["tbt_at_slo_ms"]
    default = measured[8192]
    assert default["role"] == "reference" and default["tbt_ok"] is False
    assert default["early_stop"], "a certain failure stops the replay early"
    assert "Recommended: 1024" in searched.stdout
    assert "2048 breaks p99 TBT" in " ".join(searched.stdout.split())
    assert "Your engine default (8192) breaks p99 TBT" in " ".join(searched.stdout.split())
    # The budget and nothing the user did not set; the simulated engine schedules by vLLM's
    # rules, so no SGLang arguments are written for it.
    yaml_lines = (sequential_search.run_dir / "vllm.yaml").read_text().splitlines()
    assert [ln for ln in yaml_lines if not ln.startswith("#")] == ["max-num-batched-tokens: 1024"]
    assert not (sequential_search.run_dir / "sglang.args").exists()
    assert_engines_gone(sequential_search.run_dir)


def test_no_feasible_budget_explains_what_binds(budgettune_cmd: list[str], tmp_path: Path) -> None:
    run_dir = tmp_path / "none"
    result = sweep(budgettune_cmd, "--slo-tbt", "5ms", "--budgets", "512,1024", "-o",
                   str(run_dir))  # fmt: skip
    assert result.returncode == 3, result.stderr[-3000:]
    text = " ".join(result.stdout.split())
    assert "No budget meets both SLOs" in text
    assert "TBT binds" in text
    doc = recommendation(run_dir)
    assert doc["budget"] is None and doc["choice"]["binding_slo"] == "tbt"
    assert not (run_dir / "vllm.yaml").exists()
    page = (run_dir / "report.html").read_text()
    assert "No budget meets both SLOs" in page
    # 512 fails TBT, which rules out 1024 without launching it
    assert {p["budget"] for p in doc["points"]} == {512, 8192}


FAULTY_ENGINE = """
    import os, signal, sys, threading, runpy
    args = sys.argv[1:]
    budget = args[args.index("--max-num-batched-tokens") + 1]
    if budget == "{refuse}":
        print("stand-in: refusing to start at this budget", flush=True)
        sys.exit(7)
    if budget == "{crash}":
        # serve, then die hard mid-replay, as an engine running out of memory would
        threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    sys.argv = ["sim_server", *args]
    runpy.run_module("budgettune.engines.embedded", run_name="__main__")
"""


@pytest.mark.timing  # the answer rests on 11+ ms of TBT margin
def test_engine_crash_and_failed_start_are_recorded_and_skipped(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    script = tmp_path / "faulty_engine.py"
    script.write_text(textwrap.dedent(FAULTY_ENGINE.format(refuse="2048", crash="3072")))
    run_dir = tmp_path / "faults"
    result = sweep(
        budgettune_cmd, "--slo-tbt", "46ms", "--budgets", "512,1024,2048,3072",
        "--engine-cmd", f"{sys.executable} {script}", "-o", str(run_dir),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    by_budget = {p["budget"]: p for p in points(run_dir)}
    # 1024 passes; its neighbour 2048 cannot start and 3072 crashes mid-replay: both are
    # recorded with their reason and skipped, and nothing below 1024 needs a launch
    assert by_budget[2048]["status"] == "engine_failed"
    assert "refusing to start" in by_budget[2048]["log_tail"]
    assert by_budget[3072]["status"] == "crashed"
    assert 512 not in by_budget
    assert recommendation(run_dir)["budget"] == 1024
    assert "crashed" in " ".join(result.stdout.split())
    assert_engines_gone(run_dir)


@pytest.mark.timing  # the answer rests on 11+ ms of TBT margin
def test_resume_after_kill_reruns_nothing_finished(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "resumed"
    mark = f"resume-{os.getpid()}-{time.monotonic_ns()}"
    args = ["--slo-tbt", "46ms", "--budgets", "1024,2048,3072", "--exhaustive",
            "--env", f"BUDGETTUNE_TEST_MARK={mark}"]  # fmt: skip
    proc = subprocess.Popen(
        [*budgettune_cmd, "sweep", *WORKLOAD, *args, "-o", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "points.jsonl").exists() or not points(run_dir):
            assert proc.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)  # no cleanup possible: the worst case
        proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    finished_before = {p["budget"] for p in points(run_dir)}
    assert finished_before and len(finished_before) < 4  # of 3 candidates and the default
    # the engine in flight dies with its parent (parent-death signal, and its own watchdog)
    deadline = time.monotonic() + 5
    while marked_pids(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not marked_pids(mark), "an engine outlived the SIGKILLed sweep"
    assert_engines_gone(run_dir)

    # --resume alone: the SLOs, traffic, engine and candidates come from the run folder
    resumed = subprocess.run(
        [*budgettune_cmd, "sweep", "--resume", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = " ".join(resumed.stderr.split())
    assert f"engine sim (as the sweep in {run_dir} ran)" in said
    assert f"resuming {run_dir}: {len(finished_before)} budget(s) already measured" in said
    all_points = points(run_dir)
    budgets = [p["budget"] for p in all_points]
    assert len(budgets) == len(set(budgets)), "no budget measured twice"
    assert set(budgets) == {1024, 2048, 3072, 8192}
    doc = recommendation(run_dir)
    assert doc["launches"] == 4 - len(finished_before)
    assert doc["budget"] == 1024
    assert doc["slo"]["tbt_ms"] == 46 and doc["exhaustive"] is True
    assert doc["settings"]["traffic"] == json.loads((run_dir / "sweep.json").read_text())["traffic"]

    # options given again must ask the same question: the same ones written differently pass
    # ("0.046s" is 46ms), different ones are refused in one line naming each
    same = subprocess.run(
        [*budgettune_cmd, "sweep", "--resume", str(run_dir), "--slo-tbt", "0.046s",
         "--engine", "sim", "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert same.returncode == 0, same.stderr[-3000:]
    assert json.loads(same.stdout)["launches"] == 0
    refused = subprocess.run(
        [*budgettune_cmd, "sweep", "--resume", str(run_dir), "--slo-tbt", "50ms",
         "--budgets", "512", "--rate", "16"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    first = refused.stderr.splitlines()[0]
    assert first == (
        f"error: --resume: {run_dir} was a sweep with --budgets 1024,2048,3072, --slo-tbt "
        "46ms; this command gives --budgets 512, --slo-tbt 50ms"
    ), refused.stderr
    assert "candidates" not in refused.stderr and "Traceback" not in refused.stderr


def test_resume_of_a_missing_folder_fails_before_planning(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--resume", str(tmp_path / "nope")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: --resume: {tmp_path / 'nope'} does not exist"]
    assert not (tmp_path / "nope").exists()


def test_resume_refuses_a_different_question(budgettune_cmd: list[str], tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / "sweep.json").write_text(json.dumps({"slo_tbt_s": 0.1, "schema_version": 1}))
    result = sweep(budgettune_cmd, "--slo-tbt", "46ms", "--resume", str(run_dir))
    assert result.returncode == 2
    assert "--resume:" in result.stderr and "slo_tbt_s" in result.stderr
    assert "Traceback" not in result.stderr


def marked_pids(mark: str) -> list[int]:
    """Live processes whose environment holds BUDGETTUNE_TEST_MARK=mark (found by PID)."""
    needle = f"BUDGETTUNE_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environ = (entry / "environ").read_bytes()
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if needle in environ.split(b"\0") and state != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_sweep_and_its_engine(
    budgettune_cmd: list[str], tmp_path: Path, stop_signal: signal.Signals
) -> None:
    run_dir = tmp_path / "interrupted"
    mark = f"ctrl-c-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [*budgettune_cmd, "sweep", *WORKLOAD, "--slo-tbt", "46ms", "--budgets",
         "1024,2048,3072", "--exhaustive", "--env", f"BUDGETTUNE_TEST_MARK={mark}",
         "-o", str(run_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "engine-2048.log").exists():  # the second budget is starting
            assert proc.poll() is None, "the sweep ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.2)
        time.sleep(2.0)
        assert marked_pids(mark), "the engine for 2048 is running"
        proc.send_signal(stop_signal)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    # the finished budget stays; the interrupted one is not recorded, so --resume reruns it
    assert [p["budget"] for p in points(run_dir)] == [1024]
    assert not marked_pids(mark), "Ctrl-C left an engine running"
    # and it says how to go on
    assert f"`budgettune sweep --resume {run_dir}` goes on" in stderr, stderr[-2000:]


@pytest.mark.timing  # the highest rate that meets the SLOs, as measured
def test_goodput_finds_each_verified_budgets_highest_rate(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "goodput"
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "sim", "--prompt-dist", "fixed:1000",
         "--output-dist", "fixed:32", "--rate", "8", "--requests", "40", "--seed", "1",
         "--slo-tbt", "46ms", "--slo-ttft", "300ms", "--budgets", "1024", "--baseline", "none",
         "--goodput", "--percentile", "90", "-o", str(run_dir)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (point,) = recommendation(run_dir)["points"]
    assert point["budget"] == 1024 and point["ok"]
    probes = point["goodput_probes"]
    rate = point["goodput_rate"]
    # the search met the SLOs at the rate it reports and failed just above it (2% precision)
    assert any(p["met"] and p["rate"] == rate for p in probes)
    above = [p["rate"] for p in probes if not p["met"] and p["rate"] > rate]
    assert above and min(above) <= rate * 1.05
    # every probe is a real replay on the one launched engine, with its figures kept
    assert all(p["ttft_p99_ms"] is not None for p in probes)
    # judged at --percentile 90, not p99: the figures at p90 decide, and they sit below p99
    assert all(
        p["met"] == (p["ttft_at_slo_ms"] <= 300 and p["tbt_at_slo_ms"] <= 46) for p in probes
    )
    assert all(p["tbt_at_slo_ms"] <= p["tbt_p99_ms"] for p in probes)
    # the console table shows it, and only the asked budget (not the simulator's 2048 probe)
    assert "goodput" in result.stdout
    (row,) = [line for line in result.stdout.splitlines() if line.split()[:1] == ["1024"]]
    assert row.split()[-1] == f"{rate:.3g}"
    assert "not run" not in result.stdout


@pytest.mark.parametrize(
    ("engine_args", "message"),
    [
        (["--engine", "foo"], "error: --engine: unknown engine 'foo'; known: auto, "),
        (["--engine", "external"], "error: --url: the external engine needs the server's URL"),
    ],
    ids=["unknown", "external-without-url"],
)
def test_engine_mistakes_fail_before_planning(
    budgettune_cmd: list[str], tmp_path: Path, engine_args: list[str], message: str
) -> None:
    run_dir = tmp_path / "never"
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--slo-tbt", "50ms", *engine_args, "-o", str(run_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().startswith(message), result.stderr
    assert "candidates" not in result.stderr and "Traceback" not in result.stderr
    assert not run_dir.exists(), "a mistake leaves no run folder behind"
