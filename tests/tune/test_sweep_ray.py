"""The Ray executor through the installed command, on a local Ray instance (`--ray local`) and
the built-in engine: a Ray worker killed mid-replay recorded as lost, re-queued once, and
finished by --resume, which gives the sequential answer with every worker's files brought back
into the run folder, and every Ray process gone after each command. One test: a local Ray
instance costs 10-20 s to start here, and each sweep starts one.

Needs the `ray` extra (CI installs it: scripts/setup-dev.sh). Two engines share this machine's
two cores with Ray's own processes: the workload's SLO leaves 10+ ms of margin at each budget
(see test_sweep_parallel.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from rising_tbt import SEARCH, WORKLOAD  # this folder is on sys.path under pytest
from test_sweep_parallel import alive

# verdicts on replays that share the cores, with Ray's processes beside them: nothing else beside
pytestmark = [pytest.mark.slow, pytest.mark.timing, pytest.mark.alone]

RAY_PROCESS_WORDS = (b"raylet", b"gcs_server", b"ray::", b"ray/dashboard", b"ray/_private")


def ray_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(word in cmdline for word in RAY_PROCESS_WORDS) and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def sweep(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, "sweep", *args], capture_output=True, text=True, timeout=900)


def engines_at(budget: int) -> list[tuple[int, int]]:
    """(pid, parent pid) of every built-in engine serving ``budget``."""
    found = []
    flag = f"--max-num-batched-tokens\0{budget}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if b"budgettune.engines.embedded" in cmdline and flag in cmdline:
            found.append((int(entry.name), int(stat[stat.rfind(")") + 2 :].split()[1])))
    return found


def test_a_killed_ray_worker_is_lost_requeued_once_then_resumed(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    assert ray_processes() == [], "a Ray instance is running already"
    run_dir = tmp_path / "run"
    killed: list[int] = []
    stop = threading.Event()

    def kill_the_1024_worker_twice() -> None:
        seen: set[int] = set()
        while not stop.is_set() and len(killed) < 2:
            for engine, worker in engines_at(1024):
                if engine not in seen and alive(engine):
                    seen.add(engine)
                    time.sleep(1.0)  # mid-replay
                    os.kill(worker, signal.SIGKILL)
                    killed.append(worker)
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_the_1024_worker_twice, daemon=True)
    watcher.start()
    try:
        first = sweep(budgettune_cmd, *SEARCH, "--ray", "local", "--parallel", "2",
                      "--budgets", "512,1024,2048", "-o", str(run_dir))  # fmt: skip
    finally:
        stop.set()
        watcher.join(timeout=10)
    assert first.returncode == 0, first.stderr[-3000:]
    assert len(killed) == 2, "the first try and the re-queued one were both killed"
    lines = [json.loads(x) for x in (run_dir / "points.jsonl").read_text().splitlines()]
    lost = [p for p in lines if p["budget"] == 1024]
    assert [p["status"] for p in lost] == ["lost", "lost"]
    assert "the Ray worker was lost" in lost[0]["error"]
    assert "queued again" in first.stderr
    assert not engines_at(1024), "a killed worker's engine outlived it"
    time.sleep(2.0)
    assert ray_processes() == [], "Ray processes outlived the sweep"

    resumed = sweep(budgettune_cmd, "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Traceback" not in first.stderr + resumed.stderr
    doc = json.loads((run_dir / "recommendation.json").read_text())
    by_budget = {p["budget"]: p for p in doc["points"]}
    # the sequential answer (rising_tbt.SEARCH: 1024 with 10+ ms of margin either side)
    assert by_budget[1024]["status"] == "measured" and doc["budget"] == 1024
    # --resume keeps how the sweep ran
    assert doc["executor"] == "ray" and doc["parallel"] == 2
    # the workers' files were brought back into the run folder
    for point in doc["points"]:
        if point["status"] == "measured":
            assert Path(point["results_file"]).is_file(), point
            assert point["results_file"].startswith(str(run_dir)), point
    time.sleep(2.0)
    assert ray_processes() == [], "Ray processes outlived the resumed sweep"


def test_a_two_knob_sweep_verifies_pairs_on_ray_workers(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """--max-num-seqs with several values on Ray: each pair's point and files come back into
    its max-num-seqs folder, and the answer is the one-machine sweep's."""
    assert ray_processes() == [], "a Ray instance is running already"
    run_dir = tmp_path / "run"
    done = sweep(budgettune_cmd, *WORKLOAD, "--slo-tbt", "46ms", "--budgets", "512,1024,2048",
                 "--max-num-seqs", "16,64", "--max-replays", "1", "--ray", "local",
                 "--parallel", "2", "-o", str(run_dir))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((run_dir / "recommendation.json").read_text())
    # rising_tbt.WORKLOAD: 1024 meets both SLOs at either value (TTFT well under 1 s from 16
    # running sequences up), 2048 breaks TBT by 12+ ms
    assert (doc["budget"], doc["max_num_seqs"]) == (1024, 64), doc["pairs"]["entries"]
    assert doc["executor"] == "ray"
    for folder in run_dir.glob("seqs-*"):
        for line in (folder / "points.jsonl").read_text().splitlines():
            point = json.loads(line)
            if point["status"] == "measured":
                assert Path(point["results_file"]).is_file(), point
                assert point["results_file"].startswith(str(folder)), point
    time.sleep(2.0)
    assert ray_processes() == [], "Ray processes outlived the sweep"
