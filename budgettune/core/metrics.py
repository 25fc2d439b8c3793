"""Latency metrics of BRIEF section 5 as pure functions over RequestRecords, simulated or live.

TTFT, TBT (one sample per gap, pooled over requests), TPOT (per request), E2E, output
throughput. A failed request is never dropped: its TTFT, TPOT and E2E are +inf, so it counts as
an SLO violation in every percentile, and it is counted in ``failed``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from budgettune.core.records import FloatArray, RequestRecord
from budgettune.core.units import finite_or_none, ms_or_none

QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p999", 0.999))


@dataclass(frozen=True, slots=True)
class Percentiles:
    """p50/p90/p99/p99.9/max of one metric, seconds; nan when there is no sample.

    Linear interpolation between order statistics (numpy's default), made safe for +inf.
    """

    p50: float
    p90: float
    p99: float
    p999: float
    max: float
    count: int

    def to_json_ms(self) -> dict[str, float | None]:
        """Milliseconds; null for no sample or +inf (failed requests), which JSON cannot hold."""
        return {
            name: ms_or_none(value)
            for name, value in (
                ("p50", self.p50),
                ("p90", self.p90),
                ("p99", self.p99),
                ("p999", self.p999),
                ("max", self.max),
            )
        }


def percentiles(values: FloatArray | Sequence[float]) -> Percentiles:
    """Percentiles of ``values`` (seconds; may hold +inf)."""
    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    if n == 0:
        nan = float("nan")
        return Percentiles(nan, nan, nan, nan, nan, 0)
    # Partial sort: only the order statistics the quantiles read (TBT pools ~10^5 gaps).
    positions = [q * (n - 1) for _, q in QUANTILES]
    kth = sorted({min(int(p) + d, n - 1) for p in positions for d in (0, 1)} | {n - 1})
    part = np.partition(data, kth)
    found = [_quantile(part, p) for p in positions]
    return Percentiles(found[0], found[1], found[2], found[3], float(part[n - 1]), n)


def quantile(values: FloatArray | Sequence[float], q: float) -> float:
    """The q-quantile (0-1) of ``values`` with the same interpolation as :func:`percentiles`
    (for SLOs at a percentile other than the reported ones); nan for no sample."""
    data = np.asarray(values, dtype=np.float64)
    n = len(data)
    if n == 0:
        return float("nan")
    position = min(max(q, 0.0), 1.0) * (n - 1)
    kth = sorted({min(int(position) + d, n - 1) for d in (0, 1)})
    return _quantile(np.partition(data, kth), position)


def _quantile(part: FloatArray, position: float) -> float:
    # Linear interpolation; numpy's lo + (hi - lo) * frac is nan for hi = inf and frac 0.
    lo_index = math.floor(position)
    frac = position - lo_index
    lo = float(part[lo_index])
    if frac == 0.0 or lo_index + 1 >= len(part):
        return lo
    hi = float(part[lo_index + 1])
    if hi == lo:
        return lo
    return lo + (hi - lo) * frac


def ttft_s(records: Sequence[RequestRecord]) -> FloatArray:
    """First token time minus send time, per request; +inf for a failed request."""
    return np.array(
        [r.token_times_s[0] - r.sent_s if r.ok and r.output_tokens else math.inf for r in records],
        dtype=np.float64,
    )


def tbt_s(records: Sequence[RequestRecord]) -> FloatArray:
    """Every gap between consecutive output tokens, pooled over requests (failed ones too:
    their observed gaps are real). A merged stream chunk shows up as the gaps the load
    generator spread it into (see RequestRecord)."""
    gaps = [np.diff(r.token_times_s) for r in records if len(r.token_times_s) > 1]
    return np.concatenate(gaps) if gaps else np.empty(0)


def tbt_samples(records: Sequence[RequestRecord]) -> tuple[FloatArray, FloatArray]:
    """:func:`tbt_s`'s gaps and, beside each, when it ended (its later token's time): what an
    interval on a TBT percentile resamples in time order."""
    kept = [r.token_times_s for r in records if len(r.token_times_s) > 1]
    if not kept:
        return np.empty(0), np.empty(0)
    return np.concatenate([np.diff(t) for t in kept]), np.concatenate([t[1:] for t in kept])


def ttft_samples(records: Sequence[RequestRecord]) -> tuple[FloatArray, FloatArray]:
    """:func:`ttft_s`'s values and each request's send time."""
    return ttft_s(records), np.array([r.sent_s for r in records], dtype=np.float64)


def tpot_s(records: Sequence[RequestRecord]) -> FloatArray:
    """(last token - first token) / (tokens - 1) per request with at least 2 output tokens;
    +inf for a failed request."""
    out = []
    for r in records:
        if not r.ok:
            out.append(math.inf)
        elif r.output_tokens > 1:
            times = r.token_times_s
            out.append((times[-1] - times[0]) / (len(times) - 1))
    return np.array(out, dtype=np.float64)


def e2e_s(records: Sequence[RequestRecord]) -> FloatArray:
    """Last token time minus send time, per request; +inf for a failed request."""
    return np.array(
        [r.token_times_s[-1] - r.sent_s if r.ok and r.output_tokens else math.inf for r in records],
        dtype=np.float64,
    )


def throughput_tokens_per_s(records: Sequence[RequestRecord]) -> float:
    """Output tokens delivered (failed requests' tokens included) over the span from the first
    send to the last token; 0 when nothing was delivered."""
    tokens = sum(len(r.token_times_s) for r in records)
    if not tokens:
        return 0.0
    start = min(r.sent_s for r in records)
    end = max(float(r.token_times_s[-1]) for r in records if len(r.token_times_s))
    return tokens / (end - start) if end > start else math.inf


def after_warmup(records: Sequence[RequestRecord], warmup_requests: int = 0) -> list[RequestRecord]:
    """The records without the first ``warmup_requests`` requests in send-schedule order."""
    if warmup_requests < 0:
        raise ValueError(f"warmup_requests must be >= 0, got {warmup_requests}")
    ordered = sorted(records, key=lambda r: (r.target_s, r.request_id))
    return ordered[warmup_requests:]


@dataclass(frozen=True, slots=True)
class AtQuantile:
    """TBT and TTFT at an SLO quantile other than the reported ones (``--percentile 95``),
    seconds; TBT is nan when the run has no gap."""

    quantile: float
    tbt_s: float
    ttft_s: float


@dataclass(frozen=True, slots=True)
class MetricsSummary:
    """All metrics of one run (seconds inside, milliseconds in JSON); ``at_quantile`` only when
    :func:`summarize` was asked for an SLO quantile."""

    ttft_s: Percentiles
    tbt_s: Percentiles
    tpot_s: Percentiles
    e2e_s: Percentiles
    throughput_tokens_per_s: float
    completed: int
    failed: int
    at_quantile: AtQuantile | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "ttft_ms": self.ttft_s.to_json_ms(),
            "tbt_ms": self.tbt_s.to_json_ms(),
            "tpot_ms": self.tpot_s.to_json_ms(),
            "e2e_ms": self.e2e_s.to_json_ms(),
            "throughput_tokens_per_s": finite_or_none(self.throughput_tokens_per_s),
            "completed": self.completed,
            "failed": self.failed,
        }


def summarize(
    records: Sequence[RequestRecord],
    *,
    warmup_requests: int = 0,
    slo_quantile: float | None = None,
) -> MetricsSummary:
    """Every metric over the records left after dropping the first ``warmup_requests``; with
    ``slo_quantile`` (0-1), also TBT and TTFT at that quantile."""
    kept = after_warmup(records, warmup_requests)
    failed = sum(1 for r in kept if not r.ok)
    at = None
    if slo_quantile is not None:
        at = AtQuantile(
            slo_quantile, quantile(tbt_s(kept), slo_quantile), quantile(ttft_s(kept), slo_quantile)
        )
    return MetricsSummary(
        ttft_s=percentiles(ttft_s(kept)),
        tbt_s=percentiles(tbt_s(kept)),
        tpot_s=percentiles(tpot_s(kept)),
        e2e_s=percentiles(e2e_s(kept)),
        throughput_tokens_per_s=throughput_tokens_per_s(kept),
        completed=len(kept) - failed,
        failed=failed,
        at_quantile=at,
    )
