"""Chart builders: the numbers drawn are the inputs' numbers, reference lines sit where the SLOs,
the ridge and the recommendation are, captions state hand-checkable facts, and the timeline and
CDFs are downsampled as promised."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import report_builders as rb

from budgettune.report.charts import profile_chart
from budgettune.report.charts_run import (
    MAX_TIMELINE_REQUESTS,
    MAX_TIMELINE_TOKENS,
    arrival_rate_chart,
    select_timeline,
    timeline_chart,
    workload_lengths_chart,
)
from budgettune.report.charts_sweep import (
    cdf_chart,
    failures_chart,
    latency_vs_budget_chart,
    slo_crossing,
    survival,
    throughput_chart,
)
from budgettune.report.inputs import BudgetPoint, Percentiles, SweepInput, cdf_from_samples


def test_slo_crossing_rising_interpolates_in_log_budget() -> None:
    # 40 ms at 512 and 60 ms at 1024: halfway in value = halfway in log2 budget = sqrt(512*1024)
    assert slo_crossing([512, 1024], [40.0, 60.0], 50.0) == pytest.approx(math.sqrt(512 * 1024))


def test_slo_crossing_falling() -> None:
    # TTFT 2000 ms at 512 falls to 500 ms at 1024: 1000 ms is 2/3 of the way -> 512 * 2^(2/3)
    assert slo_crossing([512, 1024], [2000.0, 500.0], 1000.0) == pytest.approx(512 * 2 ** (2 / 3))


def test_slo_crossing_none_and_gaps() -> None:
    assert slo_crossing([256, 512], [10.0, 20.0], 50.0) is None
    assert slo_crossing([256, 512, 1024], [10.0, None, 90.0], 50.0) == pytest.approx(
        math.exp(math.log(256) + 0.5 * math.log(4))
    )
    # a failed run (inf) right after a passing one: the crossing is at the last passing budget
    assert slo_crossing([256, 512], [10.0, math.inf], 50.0) == 256


def _shapes_at(fig, *, y: float | None = None, x: float | None = None) -> list:  # type: ignore[no-untyped-def]
    out = []
    for shape in fig.layout.shapes:
        if y is not None and shape.yref == "y" and shape.y0 == pytest.approx(y):
            out.append(shape)
        if x is not None and shape.xref == "x" and shape.x0 == pytest.approx(x):
            out.append(shape)
    return out


def test_tbt_chart_draws_the_measured_p99s_and_marks() -> None:
    sweep = rb.make_sweep()
    chart = latency_vs_budget_chart(sweep, "tbt")
    fig = chart.figure
    measured = next(t for t in fig.data if "measured" in t.name)
    points = sweep.numeric_points()
    expected = [p.measured_tbt.at(99) if p.measured_tbt else None for p in points]
    assert list(measured.x) == [p.budget_tokens for p in points]
    for drawn, want in zip(measured.y, expected, strict=True):
        if want is None:
            assert drawn is None  # the crashed budget: a gap, not a made-up number
        else:
            assert drawn == pytest.approx(want, rel=1e-3)
    assert _shapes_at(fig, y=rb.SLO_TBT_MS), "no SLO line at 50 ms"
    assert _shapes_at(fig, x=sweep.recommended_budget), "recommended budget not marked"
    low, high = sweep.feasible_interval() or (0, 0)
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    assert len(rects) == 1 and rects[0].x0 < low and rects[0].x1 > high
    # the synthetic law crosses 50 ms at budget 2000; the measured p99s scatter around it
    assert "crossed near" in chart.caption
    crossing = float(chart.caption.split("crossed near ")[1].split(" tokens")[0])
    assert 1536 < crossing < 2048
    assert any("engine failed" in a.text for a in fig.layout.annotations)


def test_ttft_chart_uses_log_axis_when_spread_is_wide() -> None:
    points = (
        BudgetPoint(256, measured_ttft=Percentiles({99.0: 20_000.0})),
        BudgetPoint(4096, measured_ttft=Percentiles({99.0: 50.0})),
    )
    chart = latency_vs_budget_chart(SweepInput(points=points, slo_ttft_ms=1000.0), "ttft")
    assert chart.figure.layout.yaxis.type == "log"


def test_failed_p99_is_drawn_at_the_top_not_dropped() -> None:
    points = (
        BudgetPoint(256, measured_tbt=Percentiles({99.0: 10.0}), passed=True),
        BudgetPoint(512, measured_tbt=Percentiles({99.0: math.inf}), passed=False, failed=40),
    )
    fig = latency_vs_budget_chart(SweepInput(points=points, slo_tbt_ms=50.0), "tbt").figure
    measured = next(t for t in fig.data if "measured" in t.name)
    assert measured.y[1] is not None and measured.y[1] > 50.0
    assert measured.marker.symbol[1] == "triangle-up"
    assert measured.text[1] == "inf (failures) measured"


def test_measured_p99_carries_its_interval_as_error_bars() -> None:
    points = (
        BudgetPoint(
            256, measured_tbt=Percentiles({99.0: 10.0}), passed=True,
            tbt_interval_ms=(9.0, 12.5), confidence="clear",
        ),
        BudgetPoint(
            512, measured_tbt=Percentiles({99.0: 24.0}), passed=True,
            tbt_interval_ms=(22.0, 27.0), confidence="marginal", replays=3,
        ),
        BudgetPoint(1024, measured_tbt=Percentiles({99.0: 60.0}), passed=False,
                    tbt_interval_ms=(55.0, None), confidence="clear"),
        BudgetPoint(2048, measured_tbt=Percentiles({99.0: 80.0}), passed=False),  # no interval
    )  # fmt: skip
    fig = latency_vs_budget_chart(SweepInput(points=points, slo_tbt_ms=25.0), "tbt").figure
    measured = next(t for t in fig.data if "measured" in t.name)
    assert list(measured.error_y.array[:2]) == [2.5, 3.0]
    assert list(measured.error_y.arrayminus[:2]) == [1.0, 2.0]
    top = max(measured.y[2] + measured.error_y.array[2], 0)
    assert measured.error_y.array[2] > 0 and top >= 80.0  # an open end reaches the chart's top
    assert measured.error_y.array[3] == measured.error_y.arrayminus[3] == 0.0
    assert measured.marker.symbol[:2] == ("circle", "circle-open")  # hollow: marginal
    assert measured.text[1] == (
        "24.0 ms measured, 95% interval 22.0 ms to 27.0 ms (marginal, 3 replays)"
    )


def test_throughput_chart_series_and_range() -> None:
    sweep = rb.make_sweep()
    chart = throughput_chart(sweep)
    names = [t.name for t in chart.figure.data]
    assert any("measured" in n for n in names) and any("goodput" in n for n in names)
    # the synthetic law: 4000 - 200000 / budget tokens/s, lowest at 256, highest at 8192
    assert "from 3,219 tokens/s (budget 256) to 3,976 tokens/s (budget 8192)" in chart.caption
    assert chart.figure.layout.yaxis.rangemode == "tozero"
    assert chart.title == "Throughput and goodput against budget"


def test_throughput_chart_without_goodput_does_not_promise_it() -> None:
    sweep = rb.make_sweep()
    points = tuple(dataclasses.replace(p, goodput_per_s=None) for p in sweep.points)
    chart = throughput_chart(dataclasses.replace(sweep, points=points))
    assert chart.title == "Throughput against budget"
    assert not any("goodput" in (t.name or "") for t in chart.figure.data)
    assert "run with --goodput" in chart.caption


def test_cdf_chart_one_line_per_budget_drawn_as_its_tail() -> None:
    sweep = rb.make_sweep()
    chart = cdf_chart(sweep, "tbt")
    assert chart is not None
    with_samples = [p for p in sweep.points if p.tbt_cdf is not None]
    assert len(chart.figure.data) == len(with_samples) == len(rb.BUDGETS)
    assert chart.figure.layout.xaxis.type == "log" and chart.figure.layout.yaxis.type == "log"
    n = 4000  # samples per budget in the builder
    for trace in chart.figure.data:
        assert len(trace.x) <= 400
        assert trace.y[0] == pytest.approx(1.0)  # every sample is at or above the smallest
        assert trace.y[-1] == pytest.approx(1 / n)  # only the largest is at or above itself
        assert all(a >= b for a, b in zip(trace.y, trace.y[1:], strict=False))
    assert _shapes_at(chart.figure, x=rb.SLO_TBT_MS)
    assert _shapes_at(chart.figure, y=0.01), "no p99 line at 1% above"
    assert cdf_chart(SweepInput(points=(BudgetPoint(512),)), "tbt") is None


def test_cdf_axis_starts_at_the_positive_samples_not_at_zero_gaps() -> None:
    """3% zero gaps (tokens of one merged chunk) must not stretch the log axis down to 1 us."""
    rng = np.random.default_rng(0)
    samples = np.concatenate([np.zeros(30), rng.uniform(5.0, 40.0, 970)])
    cdf = cdf_from_samples(samples)
    point = BudgetPoint(1024, tbt_cdf=cdf)
    chart = cdf_chart(SweepInput(points=(point,), slo_tbt_ms=25.0), "tbt")
    assert chart is not None
    low_ms = 10 ** chart.figure.layout.xaxis.range[0]
    assert 2.0 < low_ms < 5.0, low_ms  # 5 ms (smallest positive sample) / 1.5 margin
    only_zeros = cdf_from_samples(np.zeros(10))
    chart = cdf_chart(SweepInput(points=(BudgetPoint(512, tbt_cdf=only_zeros),)), "tbt")
    assert chart is not None and 10 ** chart.figure.layout.xaxis.range[0] > 0


def test_tail_reads_the_percentile() -> None:
    samples = np.arange(1, 101, dtype=float)  # 1..100 ms: 2% of samples are >= 99 ms
    cdf = cdf_from_samples(samples)
    assert cdf is not None
    tail = survival(cdf)
    assert tail[list(cdf.values_ms).index(99.0)] == pytest.approx(0.02)
    assert tail[list(cdf.values_ms).index(100.0)] == pytest.approx(0.01)


def test_failures_chart_stacks_reasons_and_marks_crashes() -> None:
    points = (
        BudgetPoint(256, failed=5, failure_reasons={"timeout": 3, "http 400": 2}),
        BudgetPoint(512, failed=1, failure_reasons={}),
        BudgetPoint(1024, error="engine exited with code 1"),
    )
    chart = failures_chart(SweepInput(points=points))
    bars = [t for t in chart.figure.data if t.type == "bar"]
    totals = np.sum([list(t.y) for t in bars], axis=0)
    assert totals.tolist() == [5, 1, 0]
    assert {t.name for t in bars} == {"timeout", "http 400", "failed requests"}
    crash = next(t for t in chart.figure.data if t.type == "scatter")
    assert list(crash.x) == ["1024"]
    assert "6 request(s) failed" in chart.caption


def test_profile_chart_marks_ridge_floor_ceilings_and_tiles() -> None:
    profile = rb.make_profile()
    chart = profile_chart(profile)
    fig = chart.figure
    assert _shapes_at(fig, x=256.0), "no P* line"
    assert _shapes_at(fig, x=512), "no floor line"
    rect = next(s for s in fig.layout.shapes if s.type == "rect")
    assert (rect.x0, rect.x1) == (230.0, 280.0)
    tiles = next(t for t in fig.data if (t.name or "").startswith("tile probes"))
    assert list(tiles.x) == [257, 513]
    assert tiles.text[0] == "257 vs 256: +31.7%"  # 13.3 / 10.1 - 1
    ceilings = next(t for t in fig.data if "ceiling" in (t.name or ""))
    assert list(ceilings.x) == [1000, 2250] and list(ceilings.y) == [25.0, 50.0]
    assert "P* ≈ 256 tokens (95% CI 230-280)" in chart.caption
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"


def test_workload_histograms_count_every_request() -> None:
    workload = rb.make_workload(n=2000)
    chart = workload_lengths_chart(workload)
    assert [sum(t.y) for t in chart.figure.data] == [2000, 2000]
    assert "2,000 requests" in chart.caption


def test_arrival_rate_chart_mean() -> None:
    workload = rb.make_workload(n=2000)  # Poisson at 16/s
    chart = arrival_rate_chart(workload)
    assert chart is not None
    mean = float(chart.caption.split("Mean ")[1].split(" requests/s")[0])
    assert mean == pytest.approx(16.0, rel=0.1)
    rates = np.array(chart.figure.data[0].y, dtype=float)
    assert rates.mean() == pytest.approx(mean, rel=0.1)


def test_timeline_window_holds_the_stall_and_respects_the_limits() -> None:
    timeline = rb.make_timeline(n=2000, tokens_each=250)  # 500,000 tokens in all
    chosen, (low, high) = select_timeline(timeline)
    assert low < rb.STALL_AT_S < high
    assert 0 < len(chosen) <= MAX_TIMELINE_REQUESTS
    inside = sum(
        int(np.count_nonzero((r.token_times_s >= low) & (r.token_times_s <= high))) for r in chosen
    )
    assert inside <= MAX_TIMELINE_TOKENS
    chart = timeline_chart(timeline)
    assert chart is not None
    stalls = next(t for t in chart.figure.data if t.name.startswith("gap above"))
    segments = [(a, b) for a, b in zip(stalls.x[0::3], stalls.x[1::3], strict=True)]
    # every red segment is the one 200 ms gap, starting in the iteration before STALL_AT_S
    assert segments
    for start, end in segments:
        assert end - start == pytest.approx(rb.STALL_GAP_S, abs=1e-4)
        assert rb.STALL_AT_S - 0.021 <= start < rb.STALL_AT_S
    assert "200 ms" in chart.caption
    tokens = next(t for t in chart.figure.data if t.name == "output token")
    assert len(tokens.x) == inside


def test_timeline_small_run_is_drawn_whole() -> None:
    timeline = rb.make_timeline(n=5, tokens_each=10)
    chosen, _ = select_timeline(timeline)
    assert [r.request_id for r in chosen] == [0, 1, 2, 3, 4]
