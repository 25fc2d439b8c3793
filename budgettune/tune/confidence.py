"""A budget's verdict from one or more replays, with how sure it is: TBT and TTFT at the SLO
percentile pooled over the replays, each with its 95% interval (:mod:`budgettune.core.intervals`),
the verdict, and ``clear`` or ``marginal``.

A verdict is clear when the intervals that decide it lie wholly on one side of their SLOs: both
for a pass; for a fail, the interval of each SLO it breaks (the SLO it meets decides nothing: a
TBT failure alone rules out every larger budget). An SLO an early stop cut short is not judged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from budgettune.core.confidence import Confidence
from budgettune.core.intervals import QuantileInterval, Samples, quantile_interval
from budgettune.core.metrics import tbt_samples, ttft_samples
from budgettune.core.records import RequestRecord
from budgettune.core.slo import SLO
from budgettune.core.units import finite_or_none


@dataclass(frozen=True, slots=True)
class ReplayMeasure:
    """What one replay of a budget gives its verdict: the records statistics are computed over
    (after warm-up; an early stop's cancelled requests left out), whether it ran its whole
    schedule, and which verdicts an early stop proved (``*_certain_fail``)."""

    records: Sequence[RequestRecord]
    complete: bool
    tbt_certain_fail: bool = False
    ttft_certain_fail: bool = False


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    """TBT and TTFT at the SLO percentile over the pooled replays, their intervals, each
    verdict (an SLO an incomplete replay cut short counts as met: it prunes no budget it has not
    proven infeasible), and the confidence of the whole."""

    tbt: QuantileInterval
    ttft: QuantileInterval
    tbt_ok: bool
    ttft_ok: bool
    confidence: Confidence
    replays: int

    @property
    def ok(self) -> bool:
        return self.tbt_ok and self.ttft_ok


def judge_replays(replays: Sequence[ReplayMeasure], slo: SLO) -> BudgetVerdict:
    """The verdict of a budget replayed ``len(replays)`` times (at least once)."""
    if not replays:
        raise ValueError("no replay to judge")
    q = slo.percentile / 100.0
    tbt = quantile_interval([Samples(*tbt_samples(r.records)) for r in replays], q)
    ttft = quantile_interval([Samples(*ttft_samples(r.records)) for r in replays], q)
    complete = all(r.complete for r in replays)
    tbt_certain = any(r.tbt_certain_fail for r in replays)
    ttft_certain = any(r.ttft_certain_fail for r in replays)
    # The SLO rule is core/slo's; no gap at all (every output one token long) reads as nan TBT
    # there, which has no TBT to violate.
    met = slo.judge_at(math.nan if tbt.samples == 0 else tbt.estimate_s, ttft.estimate_s)
    tbt_met, ttft_met = met.tbt_ok, met.ttft_ok
    tbt_ok = not tbt_certain and (tbt_met or not complete)
    ttft_ok = not ttft_certain and (ttft_met or not complete)
    judged = [
        (interval, limit, ok)
        for interval, limit, ok, certain in (
            (tbt, slo.tbt_s, tbt_ok, tbt_certain),
            (ttft, slo.ttft_s, ttft_ok, ttft_certain),
        )
        if complete or certain
    ]
    deciding = judged if tbt_ok and ttft_ok else [item for item in judged if not item[2]]
    clear = all(interval.confidence(limit) is Confidence.CLEAR for interval, limit, _ in deciding)
    return BudgetVerdict(
        tbt=tbt,
        ttft=ttft,
        tbt_ok=tbt_ok,
        ttft_ok=ttft_ok,
        confidence=Confidence.CLEAR if clear else Confidence.MARGINAL,
        replays=len(replays),
    )


def interval_ms(interval: QuantileInterval) -> tuple[float | None, float | None] | None:
    """``[low, high]`` in milliseconds as the documents hold it (None for +inf: failed
    requests); None when there was no sample."""
    if interval.samples == 0:
        return None
    return _rounded_ms(interval.low_s), _rounded_ms(interval.high_s)


def _rounded_ms(value_s: float) -> float | None:
    """A JSON figure in milliseconds, 4 decimals (None: an unbounded end)."""
    return finite_or_none(value_s * 1e3, digits=4)
