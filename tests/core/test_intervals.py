"""The 95% interval on a percentile: the order-statistic ranks are exact, the interval covers
the true quantile of independent data about 95% of the time, batch means widen it for data whose
slow samples come in bursts, several replays widen it to their spread, and a verdict is clear
only with the whole interval on one side of the SLO."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from budgettune.core.confidence import Confidence
from budgettune.core.intervals import (
    QuantileInterval,
    Samples,
    binomial_ranks,
    clearly_above,
    order_statistic_interval,
    quantile_interval,
)
from budgettune.core.metrics import quantile


@pytest.mark.parametrize(("n", "q"), [(150, 0.99), (1000, 0.99), (40_000, 0.99), (500, 0.9)])
def test_binomial_ranks_hold_the_quantile_with_95_percent(n: int, q: float) -> None:
    low, high = binomial_ranks(n, q)
    # P(X_(low) <= xi <= X_(high)) = P(low <= Bin(n, q) < high) for 1-based ranks
    coverage = stats.binom.cdf(high - 1, n, q) - stats.binom.cdf(low - 1, n, q)
    if high < n:  # an upper end clamped to the largest sample cannot reach 97.5%
        assert coverage >= 0.95
        assert stats.binom.cdf(high - 2, n, q) - stats.binom.cdf(low - 1, n, q) < 0.975
    assert stats.binom.cdf(low - 1, n, q) <= 0.025 < stats.binom.cdf(low, n, q)


def test_order_statistic_interval_covers_independent_samples() -> None:
    rng = np.random.default_rng(3)
    truth = -math.log(1 - 0.99)  # exponential(1)'s p99
    hits = 0
    trials = 400
    for _ in range(trials):
        low, high = order_statistic_interval(rng.exponential(size=2000), 0.99)
        hits += low <= truth <= high
    assert 0.92 <= hits / trials <= 0.99, hits


def bursty(rng: np.random.Generator, n: int) -> Samples:
    """Gaps whose slow ones come in bursts, as TBT gaps do when a long prefill stretches every
    running request's gap at once: a slow spell stretches 200 consecutive gaps at a time."""
    spells = rng.random(n // 200) < 0.05
    slow = np.repeat(spells, 200)
    values = rng.normal(10.0, 0.5, n) + slow * rng.normal(25.0, 2.0, n)
    return Samples(values * 1e-3, np.arange(n, dtype=np.float64))


def test_batch_means_widen_the_interval_for_bursty_samples() -> None:
    rng = np.random.default_rng(5)
    truth_runs = [quantile(bursty(rng, 40_000).values_s, 0.99) for _ in range(30)]
    spread = float(np.std(truth_runs))
    samples = bursty(rng, 40_000)
    os_low, os_high = order_statistic_interval(samples.values_s, 0.99)
    found = quantile_interval([samples], 0.99)
    assert found.low_s <= os_low and found.high_s >= os_high  # the hull: at least as wide
    assert found.high_s - found.low_s > 2 * (os_high - os_low)
    assert found.high_s - found.low_s > spread  # about as wide as runs actually differ
    assert found.low_s <= found.estimate_s <= found.high_s and found.replays == 1


def test_several_replays_hold_each_replays_own_percentile() -> None:
    rng = np.random.default_rng(7)
    replays = [bursty(rng, 5000) for _ in range(3)]
    found = quantile_interval(replays, 0.99)
    own = [quantile(r.values_s, 0.99) for r in replays]
    assert found.low_s <= min(own) and found.high_s >= max(own)
    assert found.estimate_s == quantile(np.concatenate([r.values_s for r in replays]), 0.99)
    assert found.samples == 15_000 and found.replays == 3


def test_failed_requests_open_the_upper_end() -> None:
    values = np.array([0.1] * 95 + [math.inf] * 5)
    found = quantile_interval([Samples(values, np.arange(100.0))], 0.99)
    assert found.estimate_s == math.inf and found.high_s == math.inf


def test_no_sample_means_nothing_to_judge() -> None:
    found = quantile_interval([Samples(np.empty(0), np.empty(0))], 0.99)
    assert found.samples == 0 and math.isnan(found.estimate_s)
    assert found.confidence(0.05) is Confidence.CLEAR


@pytest.mark.parametrize(
    ("low", "high", "slo", "expected"),
    [
        (0.010, 0.020, 0.025, Confidence.CLEAR),  # wholly within: a clear pass
        (0.030, 0.040, 0.025, Confidence.CLEAR),  # wholly above: a clear fail
        (0.020, 0.030, 0.025, Confidence.MARGINAL),
        (0.020, 0.025, 0.025, Confidence.CLEAR),  # at the SLO is within it
        (0.025, 0.030, 0.025, Confidence.MARGINAL),
        (0.030, math.inf, 0.025, Confidence.CLEAR),
    ],
)
def test_confidence_needs_the_whole_interval_on_one_side(
    low: float, high: float, slo: float, expected: Confidence
) -> None:
    interval = QuantileInterval((low + min(high, 1.0)) / 2, low, high, 100, 1)
    assert interval.confidence(slo) is expected


def test_clearly_above_agrees_with_the_interval() -> None:
    rng = np.random.default_rng(11)
    samples = bursty(rng, 20_000)
    found = quantile_interval([samples], 0.99)
    assert clearly_above(samples, 0.99, found.low_s - 1e-6)
    assert not clearly_above(samples, 0.99, found.low_s + 1e-6)
    assert not clearly_above(Samples(np.empty(0), np.empty(0)), 0.99, 0.0)
