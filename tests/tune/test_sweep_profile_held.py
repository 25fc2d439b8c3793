"""`budgettune sweep --engine vllm` without --profile but with a baseline: the profile step runs
on the baseline's engine, started as that budget's replay starts it, and the baseline's replay
follows on it, so the sweep starts one engine per budget it measures. The "vLLM" is the embedded
sim server behind vLLM's command line (fake_vllm.py), counting its own starts. Nothing here reads
a latency, so it runs beside other tests."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_vllm import FAKE_VLLM  # this folder is on sys.path under pytest

pytestmark = [pytest.mark.slow]


def test_the_profile_runs_on_the_baselines_engine_so_launches_are_the_budgets_measured(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(FAKE_VLLM))
    starts = tmp_path / "starts.txt"
    run_dir = tmp_path / "run"
    done = subprocess.run([
        *budgettune_cmd, "sweep", "--engine", "vllm", "--model", "llama-3.1-8b",
        "--gpu", "h100-sxm",
        "--engine-cmd", f"{sys.executable} {script}", "--max-num-seqs", "16",
        # --exhaustive: both budgets measured, whatever the search would have needed
        "--budgets", "512,1024", "--exhaustive", "--baseline", "1024",
        "--env", f"FAKE_VLLM_STARTS={starts}",
        "--prompt-dist", "lognormal:mean=600,sigma=0.5,max=2000", "--output-dist", "fixed:32",
        "--rate", "8", "--requests", "30", "--slo-tbt", "100ms", "--slo-ttft", "2s",
        "-o", str(run_dir),
    ], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    err = " ".join(done.stderr.split())
    # The profile's prompts stop where one and the decode batch (15: one sequence is the
    # prompt's) fit an iteration of the baseline's 1024 tokens.
    assert (
        "no --profile: profiling vllm first (prompts to 1009 tokens, decode batches to 15) into "
        f"{run_dir / 'profile.json'}, on the engine started for budget 1024, whose replay "
        "follows on it" in err
    ), err
    # Two engine processes started, for the two budgets measured; the profile had none.
    started = [line.split()[:2] for line in starts.read_text().splitlines()]
    assert sorted(budget for _, budget in started) == ["1024", "512"], started
    doc = json.loads((run_dir / "recommendation.json").read_text())
    assert doc["launches"] == len(doc["points"]) == 2, doc["launches"]
    assert {p["budget"] for p in doc["points"]} == {512, 1024}
    assert all(p["measured"]["failed"] == 0 for p in doc["points"])
    profile = json.loads((run_dir / "profile.json").read_text())
    assert profile["complete"] is True and profile["engine"]["settings"]["budget_tokens"] == 1024
    assert max(p["prompt_tokens"] for p in profile["probes"]) == 1009
    # One log for the engine both measured on; none of the profile's own.
    assert (run_dir / "engine-1024.log").is_file() and (run_dir / "engine-512.log").is_file()
    assert not (run_dir / "engine-profile.log").exists()
    # The baseline's replay ran on the profile's engine, first, and every engine is gone.
    points = [json.loads(line) for line in (run_dir / "points.jsonl").read_text().splitlines()]
    assert points[0]["budget"] == 1024
    pid_1024 = next(int(pid) for pid, budget in started if budget == "1024")
    assert points[0]["engine"]["pid"] == pid_1024, points[0]["engine"]
    for pid, _ in started:
        assert not Path(f"/proc/{pid}").exists(), f"engine {pid} outlived the sweep"


def test_a_two_knob_sweep_profiles_on_an_engine_of_its_own(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """The profile's engine runs at the engine's own max-num-seqs, none of the values tuned: the
    sweep does not replay on it, and every point is measured at its own pair."""
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(FAKE_VLLM))
    starts = tmp_path / "starts.txt"
    run_dir = tmp_path / "run"
    done = subprocess.run([
        *budgettune_cmd, "sweep", "--engine", "vllm", "--model", "llama-3.1-8b",
        "--gpu", "h100-sxm", "--engine-cmd", f"{sys.executable} {script}",
        "--max-num-seqs", "4,16", "--budgets", "512,1024", "--baseline", "1024",
        "--env", f"FAKE_VLLM_STARTS={starts}",
        "--prompt-dist", "lognormal:mean=600,sigma=0.5,max=2000", "--output-dist", "fixed:32",
        "--rate", "8", "--requests", "30", "--slo-tbt", "100ms", "--slo-ttft", "2s",
        "-o", str(run_dir),
    ], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "whose replay follows on it" not in " ".join(done.stderr.split())
    started = [line.split() for line in starts.read_text().splitlines()]
    # the profile's own engine (at the engine's own limit), then one per pair the search
    # launched, each at its pair's max-num-seqs, and only those
    doc = json.loads((run_dir / "recommendation.json").read_text())
    launched = sorted(
        (str(e["budget"]), str(e["max_num_seqs"])) for e in doc["pairs"]["entries"] if e["status"]
    )
    assert launched and sorted((b, s) for _, b, s in started[1:]) == launched, started
    assert started[0][2] not in ("4", "16"), started
    for folder in run_dir.glob("seqs-*"):
        seqs = int(folder.name.removeprefix("seqs-"))
        for line in (folder / "points.jsonl").read_text().splitlines():
            point = json.loads(line)
            assert point["budget"] in (512, 1024) and point["engine"]["max_num_seqs"] == seqs
