"""`simulate`'s scheduler and step-model options take effect: --mode serialized,
--block-aligned and --long-prefill-token-threshold, on traces small enough to count the
iterations by hand."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest


def _run(cmd: list[str], *args: str) -> dict:
    result = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    doc: dict = json.loads(result.stdout)
    return doc


def _trace(path: Path, rows: list[tuple[float, int, int]]) -> str:
    path.write_text(
        "".join(
            json.dumps({"arrival_s": t, "prompt_tokens": p, "output_tokens": o}) + "\n"
            for t, p, o in rows
        )
    )
    return str(path)


def test_serialized_mode_slows_the_mixed_iterations(budgettune_cmd: list[str]) -> None:
    # Serialized adds the decodes' KV read after the matmuls, so every iteration that mixes a
    # compute-bound prompt chunk with decodes takes longer: the gaps' p99 rises.
    args = ["simulate", "--requests", "300", "--seed", "1", "--budgets", "256,2048", "--json"]
    tbt_p99 = {}
    for mode in ("overlapped", "serialized"):
        doc = _run(budgettune_cmd, *args, "--mode", mode)
        tbt_p99[mode] = [p["tbt_ms"]["p99"] for p in doc["points"]]
    for overlapped, serialized in zip(tbt_p99["overlapped"], tbt_p99["serialized"], strict=True):
        assert serialized > overlapped * 1.02


def test_long_prefill_threshold_caps_the_tokens_a_prompt_takes(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    # Two lone 1000-token prompts (100 s apart, one output token): with a 2048 budget each is
    # one iteration; with --long-prefill-token-threshold 256 four (256, 256, 256, 232), the
    # same chunks `roofline --prompt 1000 --chunk-sizes 256` times.
    trace = _trace(tmp_path / "lone.jsonl", [(0.0, 1000, 1), (100.0, 1000, 1)])
    args = ["simulate", "--trace", trace, "--budgets", "2048", "--json"]
    whole = _run(budgettune_cmd, *args)["points"][0]["ttft_ms"]
    capped = _run(budgettune_cmd, *args, "--long-prefill-token-threshold", "256")
    capped_ttft = capped["points"][0]["ttft_ms"]
    roofline = _run(
        budgettune_cmd, "roofline", "--prompt", "1000", "--chunk-sizes", "256", "--json"
    )
    assert whole["max"] == pytest.approx(roofline["one_shot_ms"], rel=1e-9)
    assert capped_ttft["p50"] == pytest.approx(capped_ttft["max"], rel=1e-9)
    assert capped_ttft["max"] == pytest.approx(roofline["chunking"][0]["total_ms"], rel=1e-9)
    assert len(roofline["chunking"][0]["step_ms"]) == 4


def test_block_aligned_chunks_are_whole_blocks(budgettune_cmd: list[str], tmp_path: Path) -> None:
    # Budget 32, blocks of 16. A (16-token prompt, 200 outputs) and B (100-token prompt) arrive
    # together: iteration 0 holds A's 16 and B's first 16 tokens. Then A decodes, leaving 31
    # tokens a time: B's remaining 84 go in 31 + 31 + 22 (3 more iterations), or block-aligned
    # in 16 + 16 + 16 + 16 and then the last 20, which finish the prompt and need no alignment
    # (5 more). Every iteration is memory-bound (~6.5 ms, the weight read), so B's TTFT is 4
    # against 6 iterations. C, 100 s later, only gives the trace a rate.
    rows = [(0.0, 16, 200), (0.0, 100, 2), (100.0, 16, 1)]
    trace = _trace(tmp_path / "two.jsonl", rows)
    args = ["simulate", "--trace", trace, "--budgets", "32", "--block-size", "16", "--json"]
    plain = _run(budgettune_cmd, *args)["points"][0]["ttft_ms"]["max"]
    aligned = _run(budgettune_cmd, *args, "--block-aligned")["points"][0]["ttft_ms"]["max"]
    iteration_ms = _run(budgettune_cmd, "roofline", "--prefill", "32", "--json")["step_ms"]
    assert plain == pytest.approx(4 * iteration_ms, rel=0.005)
    assert aligned == pytest.approx(6 * iteration_ms, rel=0.005)
