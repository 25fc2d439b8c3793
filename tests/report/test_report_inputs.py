"""Report inputs: percentile keys, the downsampled CDF (exact points, tail resolution), the
feasible interval."""

from __future__ import annotations

import math

import numpy as np
import pytest

from budgettune.report.inputs import (
    BudgetPoint,
    Percentiles,
    SweepInput,
    cdf_from_samples,
    percentile_from_key,
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9), ("p9999", 99.99), ("max", 100.0)],
)
def test_percentile_keys(key: str, expected: float) -> None:
    assert percentile_from_key(key) == pytest.approx(expected)


@pytest.mark.parametrize("key", ["mean", "p", "99", "count", "p99x"])
def test_other_keys_are_not_percentiles(key: str) -> None:
    assert percentile_from_key(key) is None


def test_percentiles_from_keys_skips_non_numbers_and_keeps_inf() -> None:
    summary = Percentiles.from_keys(
        {"p50": 3, "p99": math.inf, "p90": None, "p999": True, "max": float("nan"), "count": 7}
    )
    assert summary.values_ms == {50.0: 3.0, 99.0: math.inf}
    assert summary.at(99) == math.inf
    assert summary.at(90) is None


def test_cdf_points_are_exact_order_statistics() -> None:
    rng = np.random.default_rng(3)
    samples = rng.lognormal(2.0, 0.7, 10_000)
    cdf = cdf_from_samples(samples, max_points=400)
    assert cdf is not None
    ordered = np.sort(samples)
    assert len(cdf.values_ms) <= 400
    assert np.all(np.diff(cdf.values_ms) >= 0) and np.all(np.diff(cdf.fraction) > 0)
    # every point (v, F) is the k-th order statistic with F = (k + 1) / n
    ranks = np.round(cdf.fraction * len(samples)).astype(int) - 1
    assert np.array_equal(cdf.values_ms, ordered[ranks])
    assert cdf.values_ms[0] == ordered[0] and cdf.values_ms[-1] == ordered[-1]
    assert cdf.fraction[-1] == 1.0
    # the tail keeps its resolution: at least half of the top 1% (100 samples) is kept, while an
    # even thinning to 400 points would keep 4 of them
    assert np.count_nonzero(cdf.fraction > 0.99) >= 50


def test_cdf_small_sample_is_kept_whole() -> None:
    cdf = cdf_from_samples([3.0, 1.0, 2.0])
    assert cdf is not None
    assert cdf.values_ms.tolist() == [1.0, 2.0, 3.0]
    assert cdf.fraction.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])


def test_cdf_failures_count_in_fractions_but_stay_off_the_chart() -> None:
    cdf = cdf_from_samples([1.0, 2.0, math.inf, math.inf])
    assert cdf is not None
    assert cdf.values_ms.tolist() == [1.0, 2.0]
    assert cdf.fraction.tolist() == [0.25, 0.5]  # the curve never reaches 1: failures
    assert cdf_from_samples([math.inf]) is None
    assert cdf_from_samples([]) is None


def test_feasible_interval_from_verdicts() -> None:
    points = tuple(
        BudgetPoint(budget_tokens=b, passed=ok)
        for b, ok in ((256, False), (512, True), (1024, True), (2048, False), (None, False))
    )
    assert SweepInput(points=points).feasible_interval() == (512, 1024)
    assert SweepInput(points=points, feasible_tokens=(512, 768)).feasible_interval() == (512, 768)
    none_pass = tuple(BudgetPoint(budget_tokens=b, passed=False) for b in (256, 512))
    assert SweepInput(points=none_pass).feasible_interval() is None
    assert [p.budget_tokens for p in SweepInput(points=points).numeric_points()] == [
        256,
        512,
        1024,
        2048,
    ]
