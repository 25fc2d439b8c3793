"""Prometheus text exposition for the embedded engine, under vLLM's metric names and buckets so
one scraper reads the sim engine and a real vLLM alike.

vLLM's inter-token histogram starts at 10 ms, too coarse to check a 16 ms p99, so the sim engine
also exports ``budgettune:inter_token_latency_seconds`` with 0.5 ms buckets up to 100 ms.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Buckets as in vLLM's v1 metrics (vllm/v1/metrics/loggers.py).
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
FINE_ITL_BUCKETS_S = tuple(round(0.0005 * i, 4) for i in range(1, 201))  # 0.5 ms .. 100 ms


@dataclass(slots=True)
class Histogram:
    """Cumulative-on-render histogram: per-bucket counts, sum and count."""

    name: str
    help: str
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)  # last one is +Inf

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1

    def render(self, labels: str) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        running = 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            running += n
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            lines.append(f'{self.name}_bucket{{le="{le}",{labels}}} {float(running)}')
        lines.append(f"{self.name}_count{{{labels}}} {float(self.count)}")
        lines.append(f"{self.name}_sum{{{labels}}} {self.total}")
        return lines


@dataclass(slots=True)
class EngineMetrics:
    """Everything the sim engine exports at GET /metrics."""

    model_name: str
    ttft: Histogram = field(init=False)
    itl: Histogram = field(init=False)
    fine_itl: Histogram = field(init=False)
    queue: Histogram = field(init=False)
    e2e: Histogram = field(init=False)
    iteration_tokens: Histogram = field(init=False)
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache (vLLM's)
    prefix_cache_hits: int = 0  # of those, found cached
    success_by_reason: dict[str, int] = field(default_factory=dict)
    running: int = 0
    waiting: int = 0

    def __post_init__(self) -> None:
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS_S,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS_S,
        )
        self.fine_itl = Histogram(
            "budgettune:inter_token_latency_seconds",
            "Inter-token latency in seconds, 0.5 ms buckets (the sim engine's own emission gaps).",
            FINE_ITL_BUCKETS_S,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS_S,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS_S,
        )
        self.iteration_tokens = Histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKEN_BUCKETS,
        )

    def observe_gap(self, gap_s: float) -> None:
        self.itl.observe(gap_s)
        self.fine_itl.observe(gap_s)

    def render(self) -> str:
        labels = f'model_name="{label_value(self.model_name)}"'
        lines: list[str] = []
        for name, kind, help_text, value in (
            ("vllm:num_requests_running", "gauge", "Number of requests in model execution.",
             self.running),
            ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
             self.waiting),
            ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption.",
             self.preemptions),
            ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
             self.prompt_tokens),
            ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
             self.generation_tokens),
            ("vllm:prefix_cache_queries_total", "counter",
             "Prefix cache queries, in terms of number of queried tokens.",
             self.prefix_cache_queries),
            ("vllm:prefix_cache_hits_total", "counter",
             "Prefix cache hits, in terms of number of cached tokens.",
             self.prefix_cache_hits),
        ):  # fmt: skip
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines.append(f"{name}{{{labels}}} {float(value)}")
        name = "vllm:request_success_total"
        lines += [
            f"# HELP {name} Count of successfully processed requests.",
            f"# TYPE {name} counter",
        ]
        for reason in sorted({"length", "stop", "abort", *self.success_by_reason}):
            count = float(self.success_by_reason.get(reason, 0))
            lines.append(f'{name}{{finished_reason="{reason}",{labels}}} {count}')
        for histogram in (
            self.ttft, self.itl, self.fine_itl, self.queue, self.e2e, self.iteration_tokens
        ):  # fmt: skip
            lines += histogram.render(labels)
        return "\n".join(lines) + "\n"


def label_value(text: str) -> str:
    """``text`` escaped for a quoted label value of the text exposition format (backslash,
    double quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
