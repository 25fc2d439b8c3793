"""Goodput search over any rate -> MetricsSummary function (simulated or live): the highest rate
whose p99 (or ``--percentile``) TBT and TTFT meet their SLOs, by bracketing then bisection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from budgettune.core.errors import SpecError
from budgettune.core.metrics import MetricsSummary
from budgettune.core.slo import SLO

DEFAULT_REL_PRECISION = 0.02


@dataclass(frozen=True, slots=True)
class RateProbe:
    """One evaluation of the search."""

    rate_per_s: float
    met: bool
    summary: MetricsSummary


@dataclass(frozen=True, slots=True)
class GoodputResult:
    """rate_per_s: the highest rate seen to meet the SLO (0.0 if even min_rate fails;
    max_rate, with ``capped`` set, if even that meets it). upper_per_s: the lowest rate seen
    to fail (inf if none). probes: every evaluation in order."""

    rate_per_s: float
    upper_per_s: float
    capped: bool
    probes: tuple[RateProbe, ...]


def find_goodput(
    evaluate: Callable[[float], MetricsSummary],
    slo: SLO,
    *,
    start_rate_per_s: float,
    rel_precision: float = DEFAULT_REL_PRECISION,
    min_rate_per_s: float | None = None,
    max_rate_per_s: float | None = None,
    on_probe: Callable[[RateProbe], None] | None = None,
) -> GoodputResult:
    """Bracket then bisect until (upper - lower) <= rel_precision x lower.

    Assumes the SLO holds below some rate and fails above it. min/max default to the start
    rate divided / multiplied by 1024. Raises SpecError for a non-positive start rate.
    """
    if not start_rate_per_s > 0:
        raise SpecError(
            f"must be positive to start the search, got {start_rate_per_s!r}", field="rate"
        )
    if not 0 < rel_precision < 1:
        raise ValueError(f"rel_precision must be in (0, 1), got {rel_precision}")
    lo_limit = min_rate_per_s if min_rate_per_s is not None else start_rate_per_s / 1024
    hi_limit = max_rate_per_s if max_rate_per_s is not None else start_rate_per_s * 1024
    probes: list[RateProbe] = []

    def probe(rate: float) -> bool:
        summary = evaluate(rate)
        result = RateProbe(rate, slo.met_by(summary), summary)
        probes.append(result)
        if on_probe is not None:
            on_probe(result)
        return result.met

    lower, upper = 0.0, float("inf")
    rate = min(max(start_rate_per_s, lo_limit), hi_limit)
    # Bracket: double while passing, halve while failing.
    if probe(rate):
        lower = rate
        while upper == float("inf"):
            if lower >= hi_limit:
                return GoodputResult(lower, upper, True, tuple(probes))
            rate = min(lower * 2, hi_limit)
            if probe(rate):
                lower = rate
            else:
                upper = rate
    else:
        upper = rate
        while lower == 0.0:
            if upper <= lo_limit:
                return GoodputResult(0.0, upper, False, tuple(probes))
            rate = max(upper / 2, lo_limit)
            if probe(rate):
                lower = rate
            else:
                upper = rate
    # Bisect.
    while upper - lower > rel_precision * lower:
        rate = (lower + upper) / 2
        if probe(rate):
            lower = rate
        else:
            upper = rate
    return GoodputResult(lower, upper, False, tuple(probes))
