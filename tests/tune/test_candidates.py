"""Candidate budgets from the ridge floor to the TBT ceiling."""

from __future__ import annotations

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.stepmodel import StepModel
from budgettune.tune.candidates import (
    budget_candidates,
    iteration_with_batch_s,
)

# The seed calibration: the arithmetic in the comments below is its (ridge 221 tokens).
H100_8B = StepModel.from_hardware(
    resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), calibration="seed"
)


def test_floor_ceiling_and_cliff_step() -> None:
    c = budget_candidates(H100_8B, slo_tbt_s=0.05, decode_batch=64, context_tokens=1200, align=256)
    # floor: ridge 221 + 64 decodes = 285 -> 512
    assert c.floor_tokens == 512
    assert c.budgets[0] == 512
    assert all(b % 256 == 0 for b in c.budgets)
    assert c.ceiling_tokens is not None
    # the ceiling fits the SLO, the step above (the last candidate) does not
    assert iteration_with_batch_s(H100_8B, c.ceiling_tokens, 64, 1200) <= 0.05
    assert c.budgets[-1] == c.ceiling_tokens + 256
    assert iteration_with_batch_s(H100_8B, c.budgets[-1], 64, 1200) > 0.05


def test_tighter_slo_gives_lower_ceiling() -> None:
    loose = budget_candidates(H100_8B, slo_tbt_s=0.1, decode_batch=32, context_tokens=1000)
    tight = budget_candidates(H100_8B, slo_tbt_s=0.03, decode_batch=32, context_tokens=1000)
    assert tight.ceiling_tokens is not None and loose.ceiling_tokens is not None
    assert tight.ceiling_tokens < loose.ceiling_tokens


def test_impossible_slo_keeps_floor_and_one_step() -> None:
    c = budget_candidates(H100_8B, slo_tbt_s=0.001, decode_batch=16, context_tokens=1000)
    assert c.ceiling_tokens is None
    assert c.budgets == (256, 512)
