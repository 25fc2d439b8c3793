"""Goodput search: bracketing and bisection over a rate -> metrics function."""

from __future__ import annotations

import math

import numpy as np
import pytest

from budgettune.core.errors import SpecError
from budgettune.core.metrics import MetricsSummary, Percentiles, summarize
from budgettune.core.records import RequestRecord
from budgettune.core.slo import SLO
from budgettune.tune.goodput import find_goodput


def _summary(tbt_p99_s: float, ttft_p99_s: float, tbt_samples: int = 100) -> MetricsSummary:
    def flat(value: float, count: int = 100) -> Percentiles:
        return Percentiles(value, value, value, value, value, count)

    return MetricsSummary(
        ttft_s=flat(ttft_p99_s),
        tbt_s=flat(tbt_p99_s, tbt_samples),
        tpot_s=flat(tbt_p99_s),
        e2e_s=flat(ttft_p99_s),
        throughput_tokens_per_s=1.0,
        completed=100,
        failed=0,
    )


SLO_50MS_1S = SLO(tbt_s=0.050, ttft_s=1.0)


def _cliff(tbt_limit_rate: float, ttft_limit_rate: float = math.inf):
    """TBT crosses 50 ms at one rate, TTFT crosses 1 s at another."""
    calls: list[float] = []

    def evaluate(rate: float) -> MetricsSummary:
        calls.append(rate)
        return _summary(0.050 * rate / tbt_limit_rate, 1.0 * rate / ttft_limit_rate)

    return evaluate, calls


@pytest.mark.parametrize("start", [1.0, 16.0, 23.7, 100.0, 5000.0])
def test_finds_the_cliff_to_two_percent(start: float) -> None:
    evaluate, calls = _cliff(23.7)
    result = find_goodput(evaluate, SLO_50MS_1S, start_rate_per_s=start)
    assert result.rate_per_s <= 23.7 < result.upper_per_s
    assert result.upper_per_s - result.rate_per_s <= 0.02 * result.rate_per_s
    assert [p.rate_per_s for p in result.probes] == calls
    assert all(p.met == (p.rate_per_s <= 23.7) for p in result.probes)
    assert not result.capped
    assert len(calls) <= 20


def test_the_tighter_slo_wins() -> None:
    evaluate, _ = _cliff(tbt_limit_rate=40.0, ttft_limit_rate=12.0)
    result = find_goodput(evaluate, SLO_50MS_1S, start_rate_per_s=16.0)
    assert result.rate_per_s <= 12.0 < result.upper_per_s


def test_zero_when_even_the_lowest_rate_fails_and_capped_at_the_top() -> None:
    result = find_goodput(lambda r: _summary(1.0, 0.1), SLO_50MS_1S, start_rate_per_s=8.0)
    assert result.rate_per_s == 0.0 and result.probes[-1].rate_per_s == pytest.approx(8 / 1024)
    result = find_goodput(
        lambda r: _summary(0.01, 0.1), SLO_50MS_1S, start_rate_per_s=8.0, max_rate_per_s=100.0
    )
    assert result.capped and result.rate_per_s == 100.0 and result.upper_per_s == math.inf


def test_no_tbt_sample_is_no_tbt_violation() -> None:
    assert SLO_50MS_1S.met_by(_summary(math.nan, 0.5, tbt_samples=0))
    assert not SLO_50MS_1S.met_by(_summary(math.inf, 0.5))
    assert not SLO_50MS_1S.met_by(_summary(0.01, math.inf))  # failed requests: TTFT +inf


def test_on_probe_sees_every_evaluation() -> None:
    evaluate, calls = _cliff(10.0)
    seen = []
    find_goodput(evaluate, SLO_50MS_1S, start_rate_per_s=16.0, on_probe=seen.append)
    assert [p.rate_per_s for p in seen] == calls


def test_errors() -> None:
    with pytest.raises(SpecError, match=r"^rate: must be positive") as caught:
        find_goodput(lambda r: _summary(0, 0), SLO_50MS_1S, start_rate_per_s=-1.0)
    assert caught.value.field == "rate"  # the CLI shows it as --rate
    with pytest.raises(SpecError, match=r"^slo_tbt: must be positive") as caught:
        SLO(tbt_s=0.0, ttft_s=1.0)
    assert caught.value.field == "slo_tbt"


def test_slo_at_another_percentile_reads_that_quantile_of_the_samples() -> None:
    # 100 requests: TTFT 0.01 .. 1.00 s, one 10 ms gap each, except 5 with a 200 ms gap.
    records = [
        RequestRecord(
            request_id=i,
            prompt_tokens=100,
            output_tokens=2,
            target_s=float(i),
            sent_s=float(i),
            token_times_s=np.asarray([i + (i + 1) / 100, i + (i + 1) / 100 + gap]),
        )
        for i, gap in enumerate([0.2 if i % 20 == 0 else 0.01 for i in range(100)])
    ]
    # p95 of the gaps: position 0.95 x 99 = 94.05 lies between the last of the 95 short gaps
    # (index 94) and the first of the 5 long ones, so it interpolates to 10 + 0.05 x 190 ms.
    summary = summarize(records, slo_quantile=0.95)
    assert summary.at_quantile is not None
    assert summary.at_quantile.ttft_s == pytest.approx(0.9505)
    assert summary.at_quantile.tbt_s == pytest.approx(0.0195)
    p95 = SLO(tbt_s=0.25, ttft_s=0.96, percentile=95)
    assert p95.met_by(summary)
    assert not SLO(tbt_s=0.25, ttft_s=0.95, percentile=95).met_by(summary)
    # A 50 ms TBT SLO holds at p95 (19.5 ms) and breaks at p99 (200 ms), as does TTFT 0.96 s.
    assert SLO(tbt_s=0.05, ttft_s=1.0, percentile=95).met_by(summary)
    assert not SLO(tbt_s=0.05, ttft_s=1.0).met_by(summary)
    assert not SLO(tbt_s=0.25, ttft_s=0.96).met_by(summary)
    with pytest.raises(ValueError, match=r"quantile 0\.9\b"):
        SLO(tbt_s=0.25, ttft_s=0.96, percentile=90).met_by(summary)
    with pytest.raises(SpecError, match=r"^percentile: must be in"):
        SLO(tbt_s=0.25, ttft_s=0.96, percentile=100)
