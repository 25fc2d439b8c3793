"""A sweep on the built-in engine measures the engine as it ships, prefix cache on: on traffic
whose prompts share long prefixes (two groups of 1,536 tokens in prompts of 1,600-2,600), the
cached tokens skip prefill, p99 TBT stays near 31 ms at every budget from 1024 up, and the
largest budget passes a 46 ms SLO; with --prefix-caching off the same sweep finds 2048 breaking
it (about 58 ms) and recommends 1024, and writes the setting into vllm.yaml. The engine's own
counters give the hit share, which matches the simulator's prediction and the traffic's own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # the answers rest on 12+ ms of margin

SYNTH = [
    "--rate", "16", "--requests", "60", "--seed", "0",
    "--prompt-dist", "uniform:min=1600,max=2600",
    "--output-dist", "lognormal:mean=64,sigma=0.5,max=256",
    "--prefix-groups", "2", "--prefix-tokens", "1536",
]  # fmt: skip
SWEEP = [
    "--engine", "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", "seed",
    "--slo-tbt", "46ms", "--slo-ttft", "1s", "--budgets", "512,1024,2048,3072,4096",
    "--max-replays", "1",
]  # fmt: skip


def _sweep(cmd: list[str], trace: Path, run_dir: Path, *args: str) -> dict:
    done = subprocess.run(
        [*cmd, "sweep", *SWEEP, "--trace", str(trace), "-o", str(run_dir), *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((run_dir / "recommendation.json").read_text())


def _config_lines(run_dir: Path) -> list[str]:
    lines = (run_dir / "vllm.yaml").read_text().splitlines()
    return [line for line in lines if not line.startswith("#")]


def test_the_cache_the_engine_ships_moves_the_budget(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    trace = tmp_path / "shared.jsonl"
    made = subprocess.run(
        [*budgettune_cmd, "trace", "synth", *SYNTH, "-o", str(trace)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    on = _sweep(budgettune_cmd, trace, tmp_path / "on")
    expected = on["load"]["expected_cache_hit_share"]
    assert 0.6 < expected < 0.75  # about 68%: 1,536 of ~2,170 tokens, first of each group cold
    assert on["engine"]["prefix_caching"]["on"] is True
    assert on["engine"]["prefix_caching"]["decided_by"].startswith("the engine's default, on")
    measured = [p for p in on["points"] if p["status"] == "measured"]
    assert measured
    for point in measured:
        share = point["prefix_cache"]["hit_share"]
        assert abs(share - expected) <= 0.05, (point["budget"], share, expected)
        assert abs(share - point["predicted"]["prefix_cache_hit_share"]) <= 0.05
        assert point["engine"]["decided_by"]["prefix_caching"].startswith("the engine's default")
    assert on["budget"] >= 4096, on["choice"]
    assert _config_lines(tmp_path / "on") == [f"max-num-batched-tokens: {on['budget']}"]

    off = _sweep(budgettune_cmd, trace, tmp_path / "off", "--prefix-caching", "off")
    assert off["engine"]["prefix_caching"] == {
        "on": False, "decided_by": "the user: --prefix-caching off"
    }  # fmt: skip
    for point in off["points"]:
        if point["status"] == "measured":
            assert point["prefix_cache"]["hits_tokens"] == 0
            assert "prefix_cache_hit_share" not in point["predicted"]
    by_budget = {p["budget"]: p for p in off["points"]}
    assert by_budget[2048]["tbt_ok"] is False
    assert off["budget"] == 1024, off["choice"]
    assert _config_lines(tmp_path / "off") == [
        "max-num-batched-tokens: 1024", "no-enable-prefix-caching: true"
    ]  # fmt: skip
