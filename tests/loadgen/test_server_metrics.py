"""Prometheus text as engines write it: escaped label values, timestamps, labels around ``le``."""

from __future__ import annotations

import math

import httpx
import pytest

from budgettune.loadgen.server_metrics import parse_prometheus, sample_labels, server_side

# A label before ``le`` whose name ends in "le" (handle="x": the old parser read le="x" out of
# it), one after it whose name also ends in "le" (model_file), escaped quotes, backslashes and
# newlines in label values, and a millisecond timestamp after each value.
TRICKY = r"""# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{handle="x",le="0.1",model_file="/m/a \"b\"\\c.gguf"} 3.0 1700000000000
vllm:time_to_first_token_seconds_bucket{handle="x",le="0.2",model_file="/m/a \"b\"\\c.gguf"} 11.0 1700000000000
vllm:time_to_first_token_seconds_bucket{handle="x",le="+Inf",model_file="/m/a \"b\"\\c.gguf"} 12.0 1700000000000
vllm:time_to_first_token_seconds_count{handle="x",model_file="/m/a \"b\"\\c.gguf"} 12.0 1700000000000
vllm:time_to_first_token_seconds_sum{handle="x",model_file="/m/a \"b\"\\c.gguf"} 1.8 1700000000000
# HELP vllm:num_preemptions_total Cumulative number of preemption.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="say \"hi\"\nbye",handle="le=\"9\""} 4.0 1700000000000
vllm:num_preemptions_total{model_name="other",handle="y"} 1.0
"""  # noqa: E501


def test_escaped_labels_timestamps_and_labels_ending_in_le() -> None:
    snapshot = parse_prometheus(TRICKY)
    ttft = snapshot.histograms["vllm:time_to_first_token_seconds"]
    # Bounds come from the real le label only; values are the sample values, not timestamps.
    assert ttft.bounds == (0.1, 0.2, math.inf)
    assert ttft.cumulative == (3.0, 11.0, 12.0)
    assert ttft.count == 12.0 and ttft.total == pytest.approx(1.8)
    # Summed over label sets (the escaped "le=" inside a value is not a label).
    assert snapshot.counters == {"vllm:num_preemptions_total": 5.0}
    assert ttft.quantile(0.5) == pytest.approx(0.1 + 0.1 * 3 / 8)


def test_sample_labels_unescapes_values() -> None:
    labels = sample_labels(TRICKY, "vllm:num_preemptions_total")
    assert labels == {"model_name": 'say "hi"\nbye', "handle": 'le="9"'}
    first_bucket = sample_labels(TRICKY, "vllm:time_to_first_token_seconds_bucket")
    assert first_bucket is not None and first_bucket["model_file"] == '/m/a "b"\\c.gguf'
    assert sample_labels(TRICKY, "vllm:missing") is None


def test_histograms_with_labels_sum_per_bound_across_label_sets() -> None:
    text = """\
sglang:x_seconds_bucket{le="0.5",tp_rank="0"} 1
sglang:x_seconds_bucket{le="+Inf",tp_rank="0"} 2
sglang:x_seconds_bucket{tp_rank="1",le="0.5"} 3
sglang:x_seconds_bucket{tp_rank="1",le="+Inf"} 3
sglang:x_seconds_sum{tp_rank="0"} 1.25
sglang:x_seconds_sum{tp_rank="1"} 0.75
sglang:x_seconds_count{tp_rank="0"} 2
sglang:x_seconds_count{tp_rank="1"} 3
"""
    histogram = parse_prometheus(text).histograms["sglang:x_seconds"]
    assert histogram.bounds == (0.5, math.inf) and histogram.cumulative == (4.0, 5.0)
    assert histogram.total == pytest.approx(2.0) and histogram.count == 5.0


def test_invalid_exposition_raises_value_error() -> None:
    with pytest.raises(ValueError):
        parse_prometheus("vllm:x{le= 1\n")
    with pytest.raises(ValueError):
        parse_prometheus('vllm:x_bucket{le="abc"} 1\n')


def test_server_side_over_tricky_text() -> None:
    before = parse_prometheus(TRICKY.replace("} 3.0 ", "} 1.0 ").replace("} 4.0 ", "} 2.0 "))
    out = server_side(before, parse_prometheus(TRICKY))
    assert out.ttft is not None and out.ttft.metric == "vllm:time_to_first_token_seconds"
    assert out.counters == {"num_preemptions_total": 2.0}


# SGLang's metric definitions (sglang/srt/metrics/collector.py): names, default buckets and the
# labels the tokenizer manager and the scheduler pass. SGLang serves them with prometheus_client,
# so the same library renders the "captured" text here.
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
TOKENIZER_LABELS = {"model_name": "meta-llama/Llama-3.1-8B-Instruct", "engine_type": "unified"}
SCHEDULER_LABELS = {
    "model_name": "meta-llama/Llama-3.1-8B-Instruct",
    "engine_type": "unified",
    "tp_rank": "0",
    "pp_rank": "0",
    "moe_ep_rank": "0",
}


class SglangServer:
    """The /metrics families of an SGLang server that the cross-check reads, and a few more."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        tok, sched = list(TOKENIZER_LABELS), list(SCHEDULER_LABELS)

        def counter(name: str, labels: list[str]) -> Counter:
            return Counter(name, name, labels, registry=self.registry)

        self.prompt = counter("sglang:prompt_tokens_total", tok)
        self.cached = counter("sglang:cached_tokens_total", tok)  # created at the first hit
        self.generation = counter("sglang:generation_tokens_total", tok)
        self.requests = counter("sglang:num_requests_total", tok)
        self.retracted = counter("sglang:num_retracted_requests_total", sched)
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds", "TTFT", tok,
            buckets=SGLANG_TTFT_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds", "ITL", tok,
            buckets=SGLANG_ITL_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.running = Gauge("sglang:num_running_reqs", "running", sched, registry=self.registry)
        self.running.labels(**SCHEDULER_LABELS).set(3)

    def finish(self, ttft_s: float, gaps_s: list[float], prompt_tokens: int) -> None:
        self.ttft.labels(**TOKENIZER_LABELS).observe(ttft_s)
        for gap in gaps_s:
            self.itl.labels(**TOKENIZER_LABELS).observe(gap)
        self.prompt.labels(**TOKENIZER_LABELS).inc(prompt_tokens)
        self.generation.labels(**TOKENIZER_LABELS).inc(len(gaps_s) + 1)
        self.requests.labels(**TOKENIZER_LABELS).inc()

    def text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()


def test_sglang_names_feed_the_cross_check() -> None:
    server = SglangServer()
    server.finish(0.15, [0.005] * 9, prompt_tokens=100)
    before_text = server.text()
    for _ in range(4):  # the run: 4 requests, TTFT in (0.2, 0.4], gaps in (10, 15] ms
        server.finish(0.3, [0.012] * 7, prompt_tokens=100)
        server.cached.labels(**TOKENIZER_LABELS).inc(32)
    server.retracted.labels(**SCHEDULER_LABELS).inc()
    out = server_side(parse_prometheus(before_text), parse_prometheus(server.text()))

    assert out.ttft is not None and out.ttft.metric == "sglang:time_to_first_token_seconds"
    assert out.ttft.count == 4 and out.ttft.mean_ms == pytest.approx(300.0)
    assert out.ttft.p50_ms == pytest.approx(300.0)  # rank 2 of 4 in (0.2, 0.4]
    assert out.itl is not None and out.itl.metric == "sglang:inter_token_latency_seconds"
    assert out.itl.count == 28 and out.itl.mean_ms == pytest.approx(12.0)
    assert out.itl.p50_ms == pytest.approx(12.5)  # rank 14 of 28 in (10, 15] ms
    assert out.loop_lateness is None
    assert out.counters == {
        "num_preemptions_total": 1.0,
        "generation_tokens_total": 32.0,
        "prompt_tokens_total": 400.0,
        "prefix_cache_queries_total": 400.0,  # SGLang's share: cached over prompt tokens
        "prefix_cache_hits_total": 128.0,
        "requests_total": 4.0,
    }
    assert list(out.to_json()) == ["ttft", "itl", *out.counters]


def test_sglang_exposition_text_as_served() -> None:
    # The opening lines of a scrape of a fresh SGLang server (prometheus_client's rendering:
    # labels in declaration order, le last, _created series beside each counter and histogram).
    text = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified"} 4100.0
# HELP sglang:prompt_tokens_created Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_created gauge
sglang:prompt_tokens_created{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified"} 1.7646e+09
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified",le="0.1"} 38.0
sglang:time_to_first_token_seconds_bucket{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified",le="0.2"} 41.0
sglang:time_to_first_token_seconds_bucket{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified",le="+Inf"} 41.0
sglang:time_to_first_token_seconds_count{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified"} 41.0
sglang:time_to_first_token_seconds_sum{model_name="qwen/qwen2.5-0.5b-instruct",engine_type="unified"} 2.05
"""  # noqa: E501
    out = server_side(None, parse_prometheus(text))
    assert out.ttft is not None and out.ttft.count == 41 and out.ttft.mean_ms == pytest.approx(50)
    assert out.counters == {
        "prompt_tokens_total": 4100.0,
        "prefix_cache_queries_total": 4100.0,
        "prefix_cache_hits_total": 0.0,  # no cached_tokens series before the first hit
    }


def test_the_wait_for_an_idle_engine_reads_its_running_gauge_until_zero() -> None:
    """After an early stop the machine-speed reading waits for the engine to finish what was
    cancelled: its running-requests gauge is polled until 0. An engine without the gauge is
    asked once; one that stays busy is given up on at the limit."""
    import asyncio

    from budgettune.loadgen.server_metrics import wait_until_idle

    async def waited(values: list[str], limit_s: float = 30.0) -> tuple[float, int]:
        asked = 0

        def answer(request: httpx.Request) -> httpx.Response:
            nonlocal asked
            asked += 1
            return httpx.Response(200, text=values[min(asked, len(values)) - 1])

        async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
            seconds = await wait_until_idle(client, "http://engine", "/metrics", limit_s)
        return seconds, asked

    gauge = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running {}\n"
    assert asyncio.run(waited([gauge.format(3), gauge.format(1), gauge.format(0)]))[1] == 3
    sglang = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {}\n"
    assert asyncio.run(waited([sglang.format(2), sglang.format(0)]))[1] == 2
    assert asyncio.run(waited(["# TYPE other gauge\nother 7\n"]))[1] == 1  # no gauge
    seconds, asked = asyncio.run(waited([gauge.format(5)], limit_s=0.5))
    assert seconds >= 0.5 and asked >= 2  # busy throughout: polled, then given up at the limit
