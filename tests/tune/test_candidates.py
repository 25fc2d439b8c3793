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


def test_the_floor_names_a_ridge_only_where_the_profile_found_a_knee() -> None:
    """A fitted model's F / B without a knee is no measured ridge (one CPU profile gave 66, the
    next 9 tokens): the words say so instead of printing it as the ridge."""
    kwargs = {"slo_tbt_s": 0.05, "decode_batch": 64, "context_tokens": 1200, "align": 256}
    roofline = budget_candidates(H100_8B, **kwargs)  # type: ignore[arg-type]
    knee = budget_candidates(H100_8B, knee_found=True, **kwargs)  # type: ignore[arg-type]
    no_knee = budget_candidates(H100_8B, knee_found=False, **kwargs)  # type: ignore[arg-type]
    assert roofline.ridge_text == "ridge 221 tokens"
    assert knee.ridge_text == "ridge 221 tokens (the profile's knee)"
    assert no_knee.ridge_text == (
        "no ridge: the profile found no knee, so the floor is the fitted model's"
    )
    assert no_knee.budgets == knee.budgets  # the same floor, only the words differ
