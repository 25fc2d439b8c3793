"""An SGLang sweep predicts with SGLang's own scheduling: by default (``--enable-mixed-chunk``
off) prompt chunks run apart from decodes, so running decoders wait out every prompt; with
``--enable-mixed-chunk`` passed through, decodes ride beside the chunks as in vLLM. The engine
command does not exist, so nothing is launched: only the predictions are compared."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def predicted_tbt_ms(budgettune_cmd: list[str], run_dir: Path, *extra: str) -> dict[int, float]:
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "sglang", "--model", "llama-3.1-8b",
         "--gpu", "h100-sxm", "--engine-cmd", str(run_dir.parent / "no-such-sglang"),
         "--profile", "analytic", "--budgets", "512,2048", "--baseline", "none",
         "--requests", "120", "--rate", "6", "--slo-tbt", "50ms", *extra, "-o", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # no engine could start: an engine failure
    doc = json.loads((run_dir / "recommendation.json").read_text())
    return {p["budget"]: p["predicted"]["tbt_at_slo_ms"] for p in doc["points"]}


def test_sglang_predictions_follow_its_mixed_chunk_setting(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    apart = predicted_tbt_ms(budgettune_cmd, tmp_path / "apart")
    mixed = predicted_tbt_ms(
        budgettune_cmd, tmp_path / "mixed", "--engine-arg", "--enable-mixed-chunk"
    )
    print(f"predicted p99 TBT ms: chunks apart {apart}, mixed {mixed}")
    # Apart, a decoder waits for every chunk of a prompt that arrives: a long gap at any budget.
    # Mixed, a small budget bounds each gap to one iteration of 512 tokens.
    assert apart[512] > 1.5 * mixed[512], (apart, mixed)
    # Mixed, the budget trades TBT as in vLLM; apart, a smaller chunk cannot shorten the wait.
    assert mixed[2048] > 1.5 * mixed[512], mixed
    assert apart[512] > 0.8 * apart[2048], apart
