"""Scrape a server's Prometheus ``/metrics`` (vLLM's, SGLang's or TensorRT-LLM's names) before
and after a run and estimate its own TTFT and inter-token-latency percentiles from the histogram
difference, for the self-check.

Percentiles come from bucket counts by linear interpolation inside the bucket (as Prometheus'
``histogram_quantile``), so they are only as fine as the buckets: vLLM's ITL buckets start at
10 ms, SGLang's at 2 ms. The sim engine's ``budgettune:inter_token_latency_seconds`` (0.5 ms
buckets) is preferred.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# Each figure under the names the engines export it, the first one a scrape has wins. SGLang's
# names are those of sglang/srt/metrics/collector.py (TokenizerMetricsCollector and, for
# retractions, SchedulerMetricsCollector).
TTFT_METRICS = (
    "vllm:time_to_first_token_seconds",
    "sglang:time_to_first_token_seconds",
    "trtllm_time_to_first_token_seconds",
)
ITL_METRICS = (
    "budgettune:inter_token_latency_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:time_per_output_token_seconds",  # vLLM before v0.10 named the same histogram so
    "sglang:inter_token_latency_seconds",
)
# TensorRT-LLM (tensorrt_llm/metrics/collector.py, at /prometheus/metrics with
# return_perf_metrics) exports trtllm_time_per_output_token_seconds, one sample per request (its
# TPOT), and no inter-token histogram: it is not read as ITL.
LATENESS_METRIC = "budgettune:iteration_lateness_seconds"  # the sim engine's loop timing
# The ``selfcheck.server`` key of each counter -> its names. SGLang retracts a running request
# when the KV cache runs out, where vLLM preempts one: the same event under another name.
COUNTERS: Mapping[str, tuple[str, ...]] = {
    "num_preemptions_total": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
    "generation_tokens_total": (
        "vllm:generation_tokens_total",
        "sglang:generation_tokens_total",
        "trtllm_generation_tokens_total",
    ),
    "prompt_tokens_total": (
        "vllm:prompt_tokens_total",
        "sglang:prompt_tokens_total",
        "trtllm_prompt_tokens_total",
    ),
    # The prefix cache, in prompt tokens: looked up, and found cached. vLLM counts a request's
    # whole prompt at its first scheduling; SGLang's share is its cached tokens over its prompt
    # tokens (its sglang:cache_hit_rate gauge is the last prefill batch's only).
    "prefix_cache_queries_total": (
        "vllm:prefix_cache_queries_total",
        "sglang:prompt_tokens_total",
    ),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "sglang:cached_tokens_total"),
    # Finished requests (vLLM, TensorRT-LLM: by finished_reason, summed here).
    "requests_total": (
        "vllm:request_success_total",
        "sglang:num_requests_total",
        "trtllm_request_success_total",
    ),
}


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
    """Parse Prometheus text exposition (version 0.0.4, through ``prometheus_client.parser``):
    histograms by family name from their ``_bucket`` (by the ``le`` label), ``_sum`` and
    ``_count`` samples; every other sample summed by its name over label sets. Timestamps are
    ignored. Raises ValueError for text that is not valid exposition."""
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    counters: dict[str, float] = {}
    for sample in _samples(text):
        name, value = sample.name, float(sample.value)
        # By sample name, not family type: a scrape without "# TYPE" lines has only
        # "unknown" families, one per sample name.
        if name.endswith("_bucket") and "le" in sample.labels:
            bound = float(sample.labels["le"])  # "+Inf" -> inf
            family = buckets.setdefault(name.removesuffix("_bucket"), {})
            family[bound] = family.get(bound, 0.0) + value
        elif name.endswith("_sum"):
            key = name.removesuffix("_sum")
            sums[key] = sums.get(key, 0.0) + value
        elif name.endswith("_count"):
            key = name.removesuffix("_count")
            counts[key] = counts.get(key, 0.0) + value
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


def sample_labels(text: str, name: str) -> dict[str, str] | None:
    """The labels (unescaped) of the first sample called ``name`` in Prometheus text, e.g. an
    info gauge such as ``vllm:cache_config_info``; None when there is none. Raises ValueError
    for text that is not valid exposition."""
    return next((dict(s.labels) for s in _samples(text) if s.name == name), None)


def _samples(text: str) -> Iterator[Sample]:
    for family in text_string_to_metric_families(text):
        yield from family.samples


async def scrape(
    client: httpx.AsyncClient, base_url: str, path: str = "/metrics"
) -> ServerSnapshot | None:
    """GET ``path`` (/metrics; TensorRT-LLM's /prometheus/metrics); None when the server does not
    expose it or its text does not parse (not an error: the self-check is then empty)."""
    try:
        response = await client.get(f"{base_url.rstrip('/')}{path}", timeout=5.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return parse_prometheus(response.text)
    except ValueError:
        return None


# The engines' gauge of requests being executed (vLLM and the built-in engine, SGLang).
RUNNING_GAUGES = ("vllm:num_requests_running", "sglang:num_running_reqs")
IDLE_POLL_S = 0.2


async def wait_until_idle(
    client: httpx.AsyncClient, base_url: str, path: str, limit_s: float
) -> float:
    """Poll the engine's running-requests gauge until it reads 0, for at most ``limit_s``;
    the seconds waited. Returns at once when the engine exposes no such gauge.

    Why: a replay stopped early cancels its requests while the engine may still be executing
    them, and on this project's 2-core machine a busy engine slows the other core's work by
    x1.4-1.6 (every early-stopped replay of a vLLM CPU sweep read the machine that much slower
    after the run than before, 2026-12-06; no complete replay did): the machine-speed reading
    after the run must wait for the engine to be idle, as before it."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() - started < limit_s:
        snapshot = await scrape(client, base_url, path)
        running = [
            snapshot.counters[g] for g in RUNNING_GAUGES if snapshot and g in snapshot.counters
        ]
        if not running or max(running) <= 0:
            break
        await asyncio.sleep(IDLE_POLL_S)
    return loop.time() - started


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
    :data:`COUNTERS` it exports (under their engine-neutral keys)."""

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
    counters' increase, each under the first of its names (vLLM's, SGLang's) the server
    exports. Empty when the server exposes no metrics."""
    if after is None:
        return ServerSide()

    def delta(name: str) -> HistogramSummary | None:
        now = after.histograms.get(name)
        if now is None:
            return None
        then = before.histograms.get(name) if before is not None else None
        return HistogramSummary.of(now.minus(then) if then is not None else now, name)

    def first(names: tuple[str, ...]) -> HistogramSummary | None:
        return next((s for s in map(delta, names) if s is not None), None)

    counters: dict[str, float] = {}
    for key, names in COUNTERS.items():
        name = next((n for n in names if n in after.counters), None)
        if name is not None:
            base = before.counters.get(name, 0.0) if before is not None else 0.0
            counters[key] = after.counters[name] - base
    if "prefix_cache_queries_total" in counters:
        # SGLang's cached-token counter has labels, so it appears at the first hit only.
        counters.setdefault("prefix_cache_hits_total", 0.0)
    return ServerSide(
        ttft=first(TTFT_METRICS),
        itl=first(ITL_METRICS),
        loop_lateness=delta(LATENESS_METRIC),
        counters=counters,
    )
