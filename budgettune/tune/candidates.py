"""Budget candidates between the ridge floor and the TBT ceiling.

Floor: a budget whose prefill share (budget minus the decodes beside it) stays above the ridge
P*, else every chunk pays a full weight read for too little work. Ceiling: the largest budget
whose modeled iteration, with the expected decode batch beside it, fits the TBT SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from budgettune.model.stepmodel import StepModel


@dataclass(frozen=True, slots=True)
class Candidates:
    """Sorted budgets to evaluate and where they came from."""

    budgets: tuple[int, ...]
    floor_tokens: int
    ceiling_tokens: int | None  # None: even the floor's iteration breaks the TBT SLO
    decode_batch: float
    ridge_tokens: float
    # whether the step-time model's profile found a knee (None: no profile, e.g. the roofline)
    knee_found: bool | None = None

    @property
    def ridge_text(self) -> str:
        """What the floor comes from, in words: see :func:`ridge_text`."""
        return ridge_text(self.ridge_tokens, self.knee_found)


def ridge_text(ridge_tokens: float | None, knee_found: bool | None) -> str:
    """The candidates' floor in words. Where the profile found no knee the fitted model's ridge
    is not a measured figure (two runs on one CPU said 66 and 9 tokens), so it is not shown."""
    if knee_found is False:
        return "no ridge: the profile found no knee, so the floor is the fitted model's"
    where = " (the profile's knee)" if knee_found else ""
    return f"ridge {ridge_tokens or 0:.0f} tokens{where}"


def round_up(value: float, align: int) -> int:
    return max(align, math.ceil(value / align) * align)


def iteration_with_batch_s(
    model: StepModel, budget_tokens: int, decode_batch: float, context_tokens: float
) -> float:
    """Modeled time of a full iteration: ``decode_batch`` decodes at ``context_tokens`` and the
    rest of the budget as one prompt chunk at offset 0."""
    decodes = max(0, round(decode_batch))
    prefill = max(0, budget_tokens - decodes)
    return model.step_time_s(prefill, prefill * prefill / 2.0, 0, decodes, decodes * context_tokens)


def budget_candidates(
    model: StepModel,
    *,
    slo_tbt_s: float,
    decode_batch: float,
    context_tokens: float,
    align: int = 256,
    max_budget_tokens: int = 65536,
    knee_found: bool | None = None,
) -> Candidates:
    """Multiples of ``align`` from the floor to the ceiling, plus one step above the ceiling to
    show the cliff. With no ceiling (the floor already breaks the SLO), the floor alone and one
    step above, so the sweep still measures and explains."""
    if align <= 0:
        raise ValueError("align must be positive")
    floor = round_up(model.ridge_tokens + decode_batch, align)
    ceiling: int | None = None
    budget = floor
    while budget <= max_budget_tokens:
        if iteration_with_batch_s(model, budget, decode_batch, context_tokens) > slo_tbt_s:
            break
        ceiling = budget
        budget += align
    top = (ceiling if ceiling is not None else floor) + align
    budgets = tuple(range(floor, min(top, max_budget_tokens) + 1, align))
    return Candidates(
        budgets=budgets,
        floor_tokens=floor,
        ceiling_tokens=ceiling,
        decode_batch=decode_batch,
        ridge_tokens=model.ridge_tokens,
        knee_found=knee_found,
    )
