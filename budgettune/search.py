"""Goodput search over any rate -> MetricsSummary function (simulated or live): the highest rate
whose p99 (or ``--percentile``) TBT and TTFT meet their SLOs, by bracketing then bisection.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from budgettune.errors import SpecError
from budgettune.metrics import MetricsSummary

DEFAULT_REL_PRECISION = 0.02


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency targets in seconds, checked at ``percentile`` (99 unless ``--percentile``)."""

    tbt_s: float
    ttft_s: float
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if not self.tbt_s > 0:
            raise SpecError(f"--slo-tbt: must be positive, got {self.tbt_s!r} s")
        if not self.ttft_s > 0:
            raise SpecError(f"--slo-ttft: must be positive, got {self.ttft_s!r} s")
        if not 0 < self.percentile < 100:
            raise SpecError(f"--percentile: must be in (0, 100), got {self.percentile!r}")

    def judge(self, summary: MetricsSummary) -> Judgement:
        """TBT and TTFT at the percentile and whether each is within target (nan, i.e. no
        sample, does not pass). A run without any TBT sample (every output one token long) has
        no TBT to violate. At a percentile other than 99 the summary must carry it
        (``summarize(slo_quantile=...)``)."""
        quantile = self.percentile / 100.0
        if math.isclose(quantile, 0.99):
            tbt_s, ttft_s = summary.tbt_s.p99, summary.ttft_s.p99
        else:
            at = summary.at_quantile
            if at is None or not math.isclose(at.quantile, quantile):
                raise ValueError(f"summary not computed at the SLO quantile {quantile}")
            tbt_s, ttft_s = at.tbt_s, at.ttft_s
        tbt_ok = summary.tbt_s.count == 0 or tbt_s <= self.tbt_s
        return Judgement(tbt_s, ttft_s, tbt_ok, ttft_s <= self.ttft_s)

    def met_by(self, summary: MetricsSummary) -> bool:
        """Both SLOs met at the percentile (see :meth:`judge`)."""
        judgement = self.judge(summary)
        return judgement.tbt_ok and judgement.ttft_ok


@dataclass(frozen=True, slots=True)
class Judgement:
    """One run against an SLO: TBT and TTFT at its percentile (seconds), and each verdict."""

    tbt_s: float
    ttft_s: float
    tbt_ok: bool
    ttft_ok: bool


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
        raise SpecError(f"--rate: must be positive to start the search, got {start_rate_per_s!r}")
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
