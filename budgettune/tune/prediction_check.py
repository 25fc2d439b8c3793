"""How far the simulator's p99 TBT was from what the engine measured, over the budgets a sweep
verified: when the measured figure is off by more than 30% (the vLLM CPU build measured 2.5x
the prediction, issue 15), the predictions on this hardware are an ordering of the budgets, not
figures, and the sweep says so with the ratio it measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from budgettune.tune.point import Point

TOLERANCE = 1.3  # measured / predicted within [1/1.3, 1.3]: the predictions are figures


@dataclass(frozen=True, slots=True)
class PredictionCheck:
    """Measured against predicted p99 TBT (at the SLO percentile) over the verified budgets:
    ``ratio`` is the median of measured / predicted; ``worst`` the budget furthest off, with
    its two figures (ms)."""

    ratio: float
    budgets: tuple[int, ...]
    worst_budget: int
    worst_measured_ms: float
    worst_predicted_ms: float

    @property
    def ordering_only(self) -> bool:
        return not 1.0 / TOLERANCE <= self.ratio <= TOLERANCE

    def sentence(self, percentile: float) -> str:
        """The plain statement the sweep prints."""
        p = f"p{percentile:g}"
        head = (
            f"measured {p} TBT is {self.ratio:.2f}x the predicted (median over budgets "
            f"{', '.join(map(str, self.budgets))}; budget {self.worst_budget}: "
            f"{self.worst_measured_ms:.3g} ms measured, {self.worst_predicted_ms:.3g} ms "
            "predicted)"
        )
        if self.ordering_only:
            return (
                f"predictions on this hardware are an ordering only: {head}; trust the "
                "measured figures, not the predicted ones"
            )
        return f"predictions agree with the measurements within {TOLERANCE - 1:.0%}: {head}"


def check_predictions(points: Sequence[Point]) -> PredictionCheck | None:
    """The check over every measured point with both figures (the complete ones when any is
    complete: a replay stopped early measured only its first requests); None without one."""
    pairs = [
        (p, p.tbt_ms, p.predicted.tbt_at_slo_ms)
        for p in points
        if p.is_measured and p.tbt_ms and p.predicted is not None and p.predicted.tbt_at_slo_ms
    ]
    complete = [pair for pair in pairs if pair[0].complete]
    pairs = complete or pairs
    if not pairs:
        return None
    ratios = [measured / predicted for _, measured, predicted in pairs]
    worst = max(range(len(pairs)), key=lambda i: abs(ratios[i] - 1.0))
    point, measured, predicted = pairs[worst]
    return PredictionCheck(
        ratio=statistics.median(ratios),
        budgets=tuple(sorted(p.budget for p, _, _ in pairs)),
        worst_budget=point.budget,
        worst_measured_ms=measured,
        worst_predicted_ms=predicted,
    )
