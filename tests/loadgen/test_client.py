"""Pure parts of the load generator: SSE parsing, merged-chunk spreading, prompt ids, stop rules,
and the Prometheus scraper's parsing and bucket quantiles."""

from __future__ import annotations

import json

import numpy as np
import pytest

from budgettune.core.errors import SpecError
from budgettune.core.records import RequestRecord
from budgettune.loadgen.client import Endpoint, SSEParser, StreamResult, request_body
from budgettune.loadgen.runner import (
    LiveRecord,
    RunOptions,
    error_rate_rule,
    prompt_ids,
    token_times_s,
)
from budgettune.loadgen.server_metrics import parse_prometheus, server_side
from budgettune.loadgen.stop import StopReason
from budgettune.trace.schedule import Schedule


def _event(text: str, completion_tokens: int | None, *, finish: str | None = None) -> bytes:
    body: dict[str, object] = {
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    if completion_tokens is not None:
        body["usage"] = {"prompt_tokens": 5, "completion_tokens": completion_tokens}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_parser_counts_tokens_from_cumulative_usage_and_splits_across_reads() -> None:
    result = StreamResult(sent_ns=0)
    parser = SSEParser(result)
    stream = _event(" a", 1) + _event(" b c d", 4) + _event(" e", 5, finish="length")
    stream += b'data: {"choices":[],"usage":{"completion_tokens":5}}\n\ndata: [DONE]\n\n'
    # Feed in awkward pieces: an event cut in the middle must wait for its end.
    cut = len(_event(" a", 1)) + 7
    parser.feed(stream[:cut], 100)
    parser.feed(stream[cut:], 250)
    parser.finish()
    assert result.chunk_tokens == [1, 3, 1]
    assert result.chunk_ns == [100, 250, 250]
    assert result.done and result.error is None
    assert result.usage == {"completion_tokens": 5}


def test_parser_without_usage_counts_one_per_chunk_then_settles_with_final_usage() -> None:
    result = StreamResult(sent_ns=0)
    parser = SSEParser(result)
    data = _event("x", None) + _event("yy", None)
    data += b'data: {"choices":[],"usage":{"completion_tokens":4}}\r\n\r\ndata: [DONE]\r\n\r\n'
    parser.feed(data, 7)
    parser.finish()
    assert result.chunk_tokens == [1, 3]  # the 2 unseen tokens go to the last chunk
    assert result.tokens == 4


def test_parser_records_a_server_error_inside_the_stream() -> None:
    result = StreamResult(sent_ns=0)
    SSEParser(result).feed(b'data: {"error": {"message": "boom", "code": 500}}\n\n', 1)
    assert result.error == "server error in stream: boom"


def test_completion_body_forces_exact_output() -> None:
    body = json.loads(request_body(Endpoint.COMPLETIONS, "m", [5, 6, 7], 9))
    assert body["prompt"] == [5, 6, 7]
    assert body["max_tokens"] == 9 and body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}  # no continuous_usage_stats


def _chat(content: str | None, *, role: bool = False, finish: str | None = None) -> bytes:
    delta: dict[str, object] = {"role": "assistant"} if role else {}
    if content is not None:
        delta["content"] = content
    body = {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def test_parser_reads_vllm_chat_stream_role_chunk_counts_nothing() -> None:
    # vLLM's shape: the role with empty content first, a chunk per token (its text may be empty:
    # part of a UTF-8 character), the last token with finish_reason, then the usage chunk.
    result = StreamResult(sent_ns=0)
    parser = SSEParser(result)
    stream = _chat("", role=True) + _chat(" a") + _chat("") + _chat("b", finish="length")
    stream += b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3}}\n\n'
    parser.feed(stream + b"data: [DONE]\n\n", 5)
    parser.finish()
    assert result.chunk_tokens == [1, 1, 1] and result.done and result.error is None


def test_parser_drops_a_trailing_empty_finish_chunk_the_usage_does_not_count() -> None:
    # SGLang closes with an empty delta carrying finish_reason: no token.
    result = StreamResult(sent_ns=0)
    parser = SSEParser(result)
    stream = _chat("", role=True) + _chat("x") + _chat("y") + _chat(None, finish="length")
    stream += b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\ndata: [DONE]\n\n'
    parser.feed(stream, 5)
    parser.finish()
    assert result.chunk_tokens == [1, 1] and result.tokens == 2


def test_token_times_first_and_spread_by_hand() -> None:
    chunks = np.array([1.0, 1.3, 1.9])
    counts = np.array([2, 1, 3])
    first = token_times_s(chunks, counts, "first")
    assert first.tolist() == [1.0, 1.0, 1.3, 1.9, 1.9, 1.9]
    spread = token_times_s(chunks, counts, "spread")
    # First chunk: both at its arrival; the 3-token chunk splits the 0.6 s gap into 0.2 s steps.
    np.testing.assert_allclose(spread, [1.0, 1.0, 1.3, 1.5, 1.7, 1.9])
    single = token_times_s(np.array([0.5, 0.7]), np.array([1, 1]), "spread")
    assert single.tolist() == [0.5, 0.7]


def test_prompt_ids_exact_length_seeded_and_prefix_groups() -> None:
    schedule = Schedule(
        target_s=np.array([0.0, 0.1, 0.2]),
        prompt_tokens=np.array([50, 60, 40]),
        output_tokens=np.array([1, 1, 1]),
        prefix_group=np.array([3, 3, -1]),
        prefix_tokens=np.array([20, 20, 0]),
    )
    options = RunOptions(seed=11)
    ids = [prompt_ids(schedule, i, options) for i in range(3)]
    assert [len(p) for p in ids] == [50, 60, 40]
    assert ids[0][:20] == ids[1][:20]  # the shared prefix
    assert ids[0][20:40] != ids[1][20:40]  # and nothing more
    assert all(options.token_id_low <= t < options.token_id_high for p in ids for t in p)
    assert prompt_ids(schedule, 2, options) == ids[2]  # seeded
    assert prompt_ids(schedule, 2, RunOptions(seed=12)) != ids[2]


def test_run_options_validation_names_the_field() -> None:
    # the field is the option's parameter name: the CLI shows it as --merged-chunks
    with pytest.raises(SpecError, match=r"^merged_chunks: unknown mode 'both'") as caught:
        RunOptions(merged_chunks="both")
    assert caught.value.field == "merged_chunks"
    with pytest.raises(SpecError, match=r"^max_error_rate: must be within 0-1") as caught:
        RunOptions(max_error_rate=1.5)
    assert caught.value.field == "max_error_rate"


def _live(ok: bool) -> LiveRecord:
    record = RequestRecord(0, 10, 1, 0.0, 0.0, np.array([0.1]) if ok else np.empty(0))
    if not ok:
        record.error = "http 500: x"
    return LiveRecord(record, 200, record.token_times_s, np.ones(len(record.token_times_s), int))


def test_error_rate_rule_waits_for_enough_requests_then_stops() -> None:
    rule = error_rate_rule(0.2, 5)
    assert rule([_live(False)] * 4) is None  # too few finished to judge
    assert rule([_live(True)] * 4 + [_live(False)]) is None  # 20% is not above 20%
    stop = rule([_live(True)] * 3 + [_live(False)] * 2)
    assert stop is not None and stop.reason is StopReason.ERROR_RATE
    assert "2 of 5" in stop.message and "--max-error-rate 20%" in stop.message


def test_live_record_json_round_trip_keeps_merged_chunks() -> None:
    chunks = np.array([0.5, 0.9])
    counts = np.array([1, 3])
    record = RequestRecord(4, 100, 4, 0.25, 0.26, token_times_s(chunks, counts, "spread"))
    record.merged_chunks = 1
    live = LiveRecord(record, 200, chunks, counts, {"completion_tokens": 4}, warmup=True)
    back = LiveRecord.from_json(json.loads(json.dumps(live.to_json())))
    assert back.record.token_times_s.tolist() == pytest.approx(record.token_times_s.tolist())
    assert back.chunk_tokens.tolist() == [1, 3] and back.chunk_times_s.tolist() == [0.5, 0.9]
    assert back.warmup and back.http_status == 200 and back.record.ok


PROM_BEFORE = """# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{le="0.2",model_name="m"} 1.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 1.0
vllm:time_to_first_token_seconds_count{model_name="m"} 1.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.05
vllm:num_preemptions_total{model_name="m"} 2.0
"""
PROM_AFTER = """vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 3.0
vllm:time_to_first_token_seconds_bucket{le="0.2",model_name="m"} 11.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 11.0
vllm:time_to_first_token_seconds_count{model_name="m"} 11.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 1.55
vllm:num_preemptions_total{model_name="m"} 5.0
"""


def test_prometheus_difference_and_bucket_quantiles_by_hand() -> None:
    before, after = parse_prometheus(PROM_BEFORE), parse_prometheus(PROM_AFTER)
    out = server_side(before, after)
    # Over the run: 2 samples in (0, 0.1], 8 in (0.1, 0.2]; mean (1.55 - 0.05) / 10 = 0.15 s.
    assert out.ttft is not None and out.ttft.count == 10
    assert out.ttft.mean_ms == pytest.approx(150.0)
    # p50: rank 5 -> 3 of the 8 in the second bucket -> 0.1 + 0.1 * 3/8.
    assert out.ttft.p50_ms == pytest.approx(137.5)
    assert out.ttft.p99_ms == pytest.approx(100 + 100 * (9.9 - 2) / 8)
    assert out.counters["num_preemptions_total"] == 3.0
    assert out.itl is None and out.loop_lateness is None
    # The document holds only what the server exported, under the names results.json uses.
    doc = out.to_json()
    assert list(doc) == ["ttft", "num_preemptions_total"]
    assert doc["ttft"] == {"metric": "vllm:time_to_first_token_seconds", "count": 10,
                           "mean_ms": out.ttft.mean_ms, "p50_ms": out.ttft.p50_ms,
                           "p99_ms": out.ttft.p99_ms}  # fmt: skip
    assert server_side(None, None).to_json() == {}
