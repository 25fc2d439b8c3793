"""Metrics over hand-built records: known percentiles, failed requests, warm-up, JSON shape."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgettune.core.metrics import (
    after_warmup,
    e2e_s,
    percentiles,
    summarize,
    tbt_s,
    throughput_tokens_per_s,
    tpot_s,
    ttft_s,
)
from budgettune.core.records import RequestRecord


def _record(
    rid: int, sent: float, times: list[float], output: int, error: str | None = None
) -> RequestRecord:
    return RequestRecord(
        request_id=rid,
        prompt_tokens=100,
        output_tokens=output,
        target_s=sent,
        sent_s=sent,
        token_times_s=np.asarray(times, dtype=np.float64),
        error=error,
    )


RECORDS = [
    _record(0, 0.0, [0.1, 0.2, 0.4], 3),
    _record(1, 1.0, [1.3, 1.35], 2),
    _record(2, 2.0, [2.05], 1),
    _record(3, 3.0, [3.5, 3.6], 4, error="short output 2/4"),  # a dropped stream
]


def test_per_request_metrics() -> None:
    np.testing.assert_allclose(ttft_s(RECORDS), [0.1, 0.3, 0.05, math.inf])
    # One sample per gap, pooled; the failed request's observed gap counts too.
    np.testing.assert_allclose(tbt_s(RECORDS), [0.1, 0.2, 0.05, 0.1])
    # (last - first) / (n - 1); one-token outputs have none; failed -> inf.
    np.testing.assert_allclose(tpot_s(RECORDS), [0.15, 0.05, math.inf])
    np.testing.assert_allclose(e2e_s(RECORDS), [0.4, 0.35, 0.05, math.inf])
    # 8 tokens delivered from the first send (0) to the last token (3.6).
    assert throughput_tokens_per_s(RECORDS) == pytest.approx(8 / 3.6)


def test_summary_counts_failed_requests_as_violations() -> None:
    summary = summarize(RECORDS)
    assert summary.completed == 3 and summary.failed == 1
    # TTFT sorted: 0.05, 0.1, 0.3, inf. p50 at position 1.5 -> 0.2; p90 at 2.7 -> into inf.
    assert summary.ttft_s.p50 == pytest.approx(0.2)
    assert summary.ttft_s.p90 == math.inf and summary.ttft_s.max == math.inf
    # TBT sorted: 0.05, 0.1, 0.1, 0.2. p90 at 2.7 -> 0.1 + 0.7 x 0.1.
    assert summary.tbt_s.p50 == pytest.approx(0.1)
    assert summary.tbt_s.p90 == pytest.approx(0.17)
    assert summary.tbt_s.max == pytest.approx(0.2)
    doc = summary.to_json()
    assert set(doc) == {
        "ttft_ms",
        "tbt_ms",
        "tpot_ms",
        "e2e_ms",
        "throughput_tokens_per_s",
        "completed",
        "failed",
    }
    assert set(doc["ttft_ms"]) == {"p50", "p90", "p99", "p999", "max"}
    assert doc["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert doc["ttft_ms"]["p99"] is None  # +inf has no JSON number
    assert doc["tbt_ms"]["max"] == pytest.approx(200.0)


def test_warmup_drops_the_first_requests_in_send_order() -> None:
    shuffled = [RECORDS[2], RECORDS[0], RECORDS[3], RECORDS[1]]
    assert [r.request_id for r in after_warmup(shuffled, 2)] == [2, 3]
    summary = summarize(shuffled, warmup_requests=2)
    assert summary.completed == 1 and summary.failed == 1
    np.testing.assert_allclose(tbt_s(after_warmup(shuffled, 2)), [0.1])
    with pytest.raises(ValueError):
        after_warmup(RECORDS, -1)


def test_one_failure_in_a_hundred_breaks_p99() -> None:
    ok = [_record(i, float(i), [i + 0.1, i + 0.2], 2) for i in range(99)]
    failed = _record(99, 99.0, [], 2, error="http 500")
    assert summarize(ok).ttft_s.p99 == pytest.approx(0.1)
    summary = summarize([*ok, failed])
    assert summary.ttft_s.p99 == math.inf and summary.failed == 1
    assert summary.ttft_s.p90 == pytest.approx(0.1)


def test_empty_metric_is_nan_and_null_in_json() -> None:
    summary = summarize([_record(0, 0.0, [0.5], 1)])
    assert summary.tbt_s.count == 0 and math.isnan(summary.tbt_s.p99)
    assert summary.to_json()["tbt_ms"] == dict.fromkeys(("p50", "p90", "p99", "p999", "max"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1e3, allow_nan=False), min_size=1, max_size=400))
def test_percentiles_match_numpy_linear(values: list[float]) -> None:
    found = percentiles(values)
    expected = np.percentile(values, [50, 90, 99, 99.9])
    np.testing.assert_allclose(
        [found.p50, found.p90, found.p99, found.p999], expected, rtol=1e-12, atol=1e-9
    )
    assert found.max == max(values) and found.count == len(values)
