"""Stop a replay as soon as its SLO verdict is certain, beyond its interval.

With numpy-style linear interpolation, the q-quantile of ``total`` samples sits between order
statistics ``floor(q (total - 1))`` and the next one. Once ``total - floor(q (total - 1))``
samples already exceed the SLO, those order statistics exceed it whatever the rest of the run
brings, so this run's p-th percentile breaks the SLO. That is certain about this run only: the
stop also waits until the 95% interval of the samples seen so far (order statistics and time
batches, :mod:`budgettune.core.intervals`) lies wholly above the SLO, so the verdict would hold
on another run of the same traffic too (a clear fail), and only then replaying on burns time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from budgettune.core.intervals import Samples, clearly_above
from budgettune.core.metrics import tbt_samples, ttft_samples
from budgettune.core.records import RequestRecord
from budgettune.loadgen.runner import LiveRecord
from budgettune.loadgen.stop import Stop, StopReason
from budgettune.trace.schedule import Schedule

RECHECK_GROWTH = 1.05  # an interval not yet clear is checked again after 5% more records


def violations_for_certain_failure(total: int, quantile: float) -> int:
    """How many of ``total`` samples above the SLO make the ``quantile`` exceed it for sure."""
    if total <= 0:
        return 1
    return total - math.floor(quantile * (total - 1))


@dataclass(slots=True)
class EarlyStop:
    """A load-generator stop rule (``StopRule``) counting TBT gaps and TTFTs above their SLOs.

    Totals come from the schedule (measured requests only: the first ``warmup`` are left out,
    like the summary does). A failed request counts as a TTFT violation. ``tbt_failed`` and
    ``ttft_failed`` say which verdict became certain: the count makes this run's percentile
    break the SLO, and the interval of the samples seen lies above it.
    """

    schedule: Schedule
    warmup: int
    slo_tbt_s: float
    slo_ttft_s: float
    quantile: float
    tbt_failed: bool = False
    ttft_failed: bool = False
    _seen: int = 0
    _tbt_over: int = 0
    _ttft_over: int = 0
    _tbt_limit: int = 0
    _ttft_limit: int = 0
    _checked_at: int = 0  # records seen when the interval was last found not yet clear

    def __post_init__(self) -> None:
        outputs = self.schedule.output_tokens[self.warmup :]
        self._tbt_limit = violations_for_certain_failure(
            int(np.maximum(outputs - 1, 0).sum()), self.quantile
        )
        self._ttft_limit = violations_for_certain_failure(len(outputs), self.quantile)

    def __call__(self, records: Sequence[LiveRecord]) -> Stop | None:
        for live in records[self._seen :]:
            if live.warmup:
                continue
            record = live.record
            times = record.token_times_s
            if len(times) > 1:
                self._tbt_over += int(np.count_nonzero(np.diff(times) > self.slo_tbt_s))
            if not record.ok or not len(times) or times[0] - record.sent_s > self.slo_ttft_s:
                self._ttft_over += 1
        self._seen = len(records)
        tbt_counted = self._tbt_over >= self._tbt_limit
        ttft_counted = self._ttft_over >= self._ttft_limit
        if not (tbt_counted or ttft_counted) or len(records) < self._checked_at * RECHECK_GROWTH:
            return None
        kept = [live.record for live in records if not live.warmup]
        self.tbt_failed = tbt_counted and self._clear_fail(tbt_samples(kept), self.slo_tbt_s)
        self.ttft_failed = ttft_counted and self._clear_fail(ttft_samples(kept), self.slo_ttft_s)
        if not (self.tbt_failed or self.ttft_failed):
            self._checked_at = len(records)  # look again once more requests finished
        if self.tbt_failed or self.ttft_failed:
            which = " and ".join(
                name
                for name, failed in (("TBT", self.tbt_failed), ("TTFT", self.ttft_failed))
                if failed
            )
            return Stop(
                StopReason.EARLY_STOP,
                f"early stop: the p{self.quantile * 100:g} {which} verdict is certain "
                f"({self._tbt_over} gaps above the TBT SLO, {self._ttft_over} TTFTs above the "
                "TTFT SLO)",
            )
        return None

    def _clear_fail(self, samples: tuple[np.ndarray, np.ndarray], slo_s: float) -> bool:
        """The 95% interval of the percentile over these samples lies wholly above ``slo_s``."""
        return clearly_above(Samples(*samples), self.quantile, slo_s)


def measured_records(records: Sequence[LiveRecord]) -> list[RequestRecord]:
    """The records a replay's statistics are computed over: after warm-up, and without the
    requests an early stop cancelled in flight (our doing, not the engine's failures)."""
    return [live.record for live in records if not live.warmup and not live.cancelled]
