"""Scrape a server's Prometheus ``/metrics`` (vLLM names) before and after a run and estimate its
own TTFT and inter-token-latency percentiles from the histogram difference, for the self-check.

Percentiles come from bucket counts by linear interpolation inside the bucket (as Prometheus'
``histogram_quantile``), so they are only as fine as the buckets: vLLM's ITL buckets start at
10 ms. The sim engine's ``budgettune:inter_token_latency_seconds`` (0.5 ms buckets) is preferred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

TTFT_METRIC = "vllm:time_to_first_token_seconds"
ITL_METRICS = (
    "budgettune:inter_token_latency_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",  # vLLM before v0.10 named the same histogram so
)
LATENESS_METRIC = "budgettune:iteration_lateness_seconds"  # the sim engine's loop timing
COUNTERS = (
    "vllm:num_preemptions_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
)


@dataclass(slots=True, frozen=True)
class HistogramData:
    """Cumulative bucket counts by upper bound (the last bound is +inf), sum and count."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float
    count: float

    def minus(self, other: HistogramData) -> HistogramData:
        if other.bounds != self.bounds:
            return self
        return HistogramData(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.total - other.total,
            self.count - other.count,
        )

    def quantile(self, q: float) -> float | None:
        """The q-quantile (0-1) by interpolation within its bucket; None when empty."""
        if self.count <= 0 or not self.cumulative:
            return None
        rank = q * self.cumulative[-1]
        lower_bound, lower_count = 0.0, 0.0
        for bound, cumulative in zip(self.bounds, self.cumulative, strict=True):
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower_bound  # beyond the last finite bucket: its bound is all we know
                in_bucket = cumulative - lower_count
                share = (rank - lower_count) / in_bucket if in_bucket > 0 else 1.0
                return lower_bound + (bound - lower_bound) * share
            lower_bound, lower_count = bound, cumulative
        return lower_bound


@dataclass(slots=True, frozen=True)
class ServerSnapshot:
    """Histograms and counters from one scrape, summed over label sets."""

    histograms: dict[str, HistogramData]
    counters: dict[str, float]


def parse_prometheus(text: str) -> ServerSnapshot:
    """Parse Prometheus text exposition; histograms by family name, other samples summed."""
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    counters: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value_text = line.rpartition(" ")
        try:
            value = float(value_text)
        except ValueError:
            continue
        name, _, labels = name_part.partition("{")
        if name.endswith("_bucket"):
            le = _label(labels, "le")
            if le is None:
                continue
            bound = math.inf if le == "+Inf" else float(le)
            family = buckets.setdefault(name[: -len("_bucket")], {})
            family[bound] = family.get(bound, 0.0) + value
        elif name.endswith("_sum"):
            sums[name[:-4]] = sums.get(name[:-4], 0.0) + value
        elif name.endswith("_count"):
            counts[name[:-6]] = counts.get(name[:-6], 0.0) + value
        else:
            counters[name] = counters.get(name, 0.0) + value
    histograms = {
        family: HistogramData(
            tuple(sorted(by_bound)),
            tuple(by_bound[b] for b in sorted(by_bound)),
            sums.get(family, 0.0),
            counts.get(family, 0.0),
        )
        for family, by_bound in buckets.items()
    }
    return ServerSnapshot(histograms, counters)


def _label(labels: str, key: str) -> str | None:
    marker = f'{key}="'
    start = labels.find(marker)
    if start < 0:
        return None
    start += len(marker)
    return labels[start : labels.find('"', start)]


async def scrape(client: httpx.AsyncClient, base_url: str) -> ServerSnapshot | None:
    """GET /metrics; None when the server does not expose it (not an error)."""
    try:
        response = await client.get(f"{base_url.rstrip('/')}/metrics", timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    return parse_prometheus(response.text)


@dataclass(slots=True, frozen=True)
class HistogramSummary:
    """One server histogram over the run: which metric, how many samples, mean, p50 and p99 in
    milliseconds (bucket estimates, 3 decimals; None when it has no samples)."""

    metric: str
    count: int
    mean_ms: float | None
    p50_ms: float | None
    p99_ms: float | None

    @classmethod
    def of(cls, histogram: HistogramData, name: str) -> HistogramSummary:
        def ms(value: float | None) -> float | None:
            return None if value is None else round(value * 1e3, 3)

        mean = histogram.total / histogram.count if histogram.count > 0 else None
        return cls(
            metric=name,
            count=int(histogram.count),
            mean_ms=ms(mean),
            p50_ms=ms(histogram.quantile(0.5)),
            p99_ms=ms(histogram.quantile(0.99)),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "metric": self.metric,
            "count": self.count,
            "mean_ms": self.mean_ms,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }


@dataclass(slots=True, frozen=True)
class ServerSide:
    """The server's own figures over a run: TTFT, inter-token latency and (the sim engine's)
    loop lateness, each None when the server does not export it, and the increase of the
    :data:`COUNTERS` it exports (named without the ``vllm:`` prefix)."""

    ttft: HistogramSummary | None = None
    itl: HistogramSummary | None = None
    loop_lateness: HistogramSummary | None = None
    counters: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """The ``selfcheck.server`` record: only the figures the server exported (``{}`` for a
        server without /metrics)."""
        out: dict[str, object] = {}
        for key, summary in (("ttft", self.ttft), ("itl", self.itl),
                             ("loop_lateness", self.loop_lateness)):  # fmt: skip
            if summary is not None:
                out[key] = summary.to_json()
        out.update(self.counters)
        return out


def server_side(before: ServerSnapshot | None, after: ServerSnapshot | None) -> ServerSide:
    """The server's own TTFT and ITL over the run (after - before), bucket-estimated, and the
    counters' increase. Empty when the server exposes no metrics."""
    if after is None:
        return ServerSide()

    def delta(name: str) -> HistogramSummary | None:
        now = after.histograms.get(name)
        if now is None:
            return None
        then = before.histograms.get(name) if before is not None else None
        return HistogramSummary.of(now.minus(then) if then is not None else now, name)

    itl = next((s for s in map(delta, ITL_METRICS) if s is not None), None)
    counters: dict[str, float] = {}
    for name in COUNTERS:
        if name in after.counters:
            base = before.counters.get(name, 0.0) if before is not None else 0.0
            counters[name.removeprefix("vllm:")] = after.counters[name] - base
    return ServerSide(
        ttft=delta(TTFT_METRIC), itl=itl, loop_lateness=delta(LATENESS_METRIC), counters=counters
    )
