"""The SLO judgement, written once: TBT and TTFT targets at a percentile, and whether a run's
summary meets them. Search, sweep, replay and report all judge through :class:`SLO`."""

from __future__ import annotations

import math
from dataclasses import dataclass

from budgettune.core.errors import SpecError
from budgettune.core.metrics import MetricsSummary


def check_percentile(percentile: float) -> float:
    """The percentile an SLO may constrain, one rule for every command: at least 50 and below
    100. Below the median it is no latency target (half the requests may miss it); 100, the
    maximum, is one request's luck, and no sample size gives it a confidence interval (the
    order-statistic interval needs ranks above it). Raises SpecError naming ``percentile``."""
    if not (math.isfinite(percentile) and 50 <= percentile < 100):
        raise SpecError(f"must be in [50, 100), got {percentile:g}", field="percentile")
    return percentile


@dataclass(frozen=True, slots=True)
class SLO:
    """Latency targets in seconds, checked at ``percentile`` (99 unless ``--percentile``)."""

    tbt_s: float
    ttft_s: float
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if not self.tbt_s > 0:
            raise SpecError(f"must be positive, got {self.tbt_s!r} s", field="slo_tbt")
        if not self.ttft_s > 0:
            raise SpecError(f"must be positive, got {self.ttft_s!r} s", field="slo_ttft")
        check_percentile(self.percentile)

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
        return self.judge_at(tbt_s, ttft_s)

    def judge_at(self, tbt_s: float, ttft_s: float) -> Judgement:
        """TBT and TTFT already read at the percentile (seconds) against the targets: a nan
        TBT (no gap: every output one token long) has no TBT to violate; a nan TTFT (no
        sample) does not pass, +inf (failed requests) neither."""
        tbt_ok = math.isnan(tbt_s) or tbt_s <= self.tbt_s
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
