"""A 95% interval on a measured percentile (the p99 an SLO constrains), from the samples of one
or several replays, and whether a verdict against the SLO is clear or marginal.

The interval is the hull of three (README, "How sure is a p99"):

1. The order-statistic interval: with n independent samples the q-quantile lies between the
   order statistics whose ranks Bin(n, q) puts at 2.5% and 97.5%. Distribution-free and exact,
   but it trusts every sample to be independent, and TBT gaps are not: one long prefill
   iteration stretches the gap of every running request at once. On the built-in engine six
   replays of one budget with fresh arrival seeds gave p99 TBT 21.7-22.6 ms while a single
   replay's order-statistic interval was 0.1-0.4 ms wide; it held another replay's p99 in 1 of
   30 pairs.
2. Batch means over time: each replay is cut into BATCHES equal-count batches in time order,
   the percentile is read in each, and their spread gives a Student-t interval around the
   estimate (batches, not samples, are taken as independent). In the same six replays it held
   another replay's p99 in 25 of 30 pairs (a time-block bootstrap, tried first, in 17).
3. The run-to-run spread: when a budget was replayed more than once, the batches of every
   replay feed (2) and the interval holds each replay's own percentile too.

A p99 of a few hundred requests (TTFT) stays loosely known whatever the method: the same six
replays gave p99 TTFT 90-222 ms. That is why a verdict inside its interval is called marginal
and the budget replayed again.

Samples are seconds; +inf (a failed request's TTFT) is allowed and sorts last. Pure functions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from budgettune.core.confidence import Confidence
from budgettune.core.metrics import quantile
from budgettune.core.records import FloatArray

LEVEL = 0.95
BATCHES = 4  # time batches per replay (4 held other replays' p99 best: 3 too few, 5-8 too wide)
MIN_BATCH_SAMPLES = 5  # fewer samples than BATCHES x this: fewer, larger batches


@dataclass(frozen=True, slots=True)
class Samples:
    """One replay's samples of a metric and when each was taken (seconds, run clock)."""

    values_s: FloatArray
    times_s: FloatArray

    def __post_init__(self) -> None:
        if len(self.values_s) != len(self.times_s):
            raise ValueError("one time per sample")


@dataclass(frozen=True, slots=True)
class QuantileInterval:
    """A percentile's estimate and its 95% interval, seconds (``high_s`` may be +inf: failed
    requests); nan throughout when there was no sample. ``replays``: how many replays it pools."""

    estimate_s: float
    low_s: float
    high_s: float
    samples: int
    replays: int

    def confidence(self, slo_s: float) -> Confidence:
        """Clear when the interval lies wholly at or below ``slo_s`` (a pass) or wholly above
        it (a fail); a metric with no sample (TBT of one-token outputs) has nothing to judge
        and is clear."""
        if self.samples == 0 or self.high_s <= slo_s or self.low_s > slo_s:
            return Confidence.CLEAR
        return Confidence.MARGINAL

    def widened(self, low_s: float, high_s: float) -> QuantileInterval:
        """This interval stretched to hold ``[low_s, high_s]`` too."""
        return QuantileInterval(
            self.estimate_s,
            min(self.low_s, low_s),
            max(self.high_s, high_s),
            self.samples,
            self.replays,
        )


def quantile_interval(
    replays: Sequence[Samples], q: float, *, level: float = LEVEL
) -> QuantileInterval:
    """The ``q``-quantile (0-1) of every replay's samples pooled, and its ``level`` interval:
    the hull of the order-statistic interval, the batch-means interval and, with several
    replays, each replay's own quantile."""
    kept = [r for r in replays if len(r.values_s)]
    if not kept:
        nan = math.nan
        return QuantileInterval(nan, nan, nan, 0, len(replays))
    pooled = np.concatenate([r.values_s for r in kept])
    estimate = quantile(pooled, q)
    low, high = order_statistic_interval(pooled, q, level)
    batch_low, batch_high = batch_means_interval(kept, q, estimate, level)
    low, high = min(low, batch_low, estimate), max(high, batch_high, estimate)
    if len(kept) > 1:
        own = [quantile(r.values_s, q) for r in kept]
        low, high = min(low, *own), max(high, *own)
    # a percentile is never below the smallest sample (the t-interval can reach below it)
    low = max(low, float(pooled.min()))
    return QuantileInterval(estimate, low, high, len(pooled), len(replays))


def order_statistic_interval(
    values_s: FloatArray, q: float, level: float = LEVEL
) -> tuple[float, float]:
    """The distribution-free interval of the ``q``-quantile: the order statistics at ranks
    ``r`` and ``s`` (1-based) with ``P(rank < r) <= (1 - level)/2`` and ``P(rank >= s) <=
    (1 - level)/2`` under Bin(n, q). With too few samples to bound it (a p99 of 100 samples) an
    end is the smallest or largest sample."""
    n = len(values_s)
    low_rank, high_rank = binomial_ranks(n, q, level)
    ordered = np.sort(values_s)
    return float(ordered[low_rank - 1]), float(ordered[high_rank - 1])


def binomial_ranks(n: int, q: float, level: float = LEVEL) -> tuple[int, int]:
    """1-based ranks ``(r, s)`` of the order statistics bounding the ``q``-quantile of ``n``
    samples with probability at least ``level`` (clamped to 1..n)."""
    if n < 1:
        raise ValueError("no samples")
    tail = (1.0 - level) / 2.0
    # smallest k with CDF(k) >= tail: ranks 1..k hold the quantile with probability < tail
    low = _binomial_ppf(tail, n, q)
    high = _binomial_ppf(1.0 - tail, n, q) + 1
    return max(1, min(n, low)), max(1, min(n, high))


def _binomial_ppf(p: float, n: int, q: float) -> int:
    """The smallest k in 0..n with P(Bin(n, q) <= k) >= p (bisection on the exact CDF)."""
    from scipy.special import bdtr  # 0.2 s to import; only where an interval is computed

    low, high = 0, n
    while low < high:
        middle = (low + high) // 2
        if bdtr(middle, n, q) >= p:
            high = middle
        else:
            low = middle + 1
    return low


def batch_means_interval(
    replays: Sequence[Samples], q: float, estimate_s: float, level: float = LEVEL
) -> tuple[float, float]:
    """``estimate_s`` plus or minus Student's t at ``level`` times the standard error of the
    ``q``-quantiles of the replays' time batches (:func:`time_batches`). With one batch, or a
    batch whose quantile is +inf (failed requests), the interval says nothing: the estimate
    alone, or an open upper end."""
    found = [quantile(batch, q) for r in replays for batch in time_batches(r.values_s, r.times_s)]
    if len(found) < 2:
        return estimate_s, estimate_s
    if not all(math.isfinite(value) for value in found):
        return min(found), math.inf
    from scipy.special import stdtrit  # only where an interval is computed

    spread = float(np.std(found, ddof=1)) / math.sqrt(len(found))
    half = float(stdtrit(len(found) - 1, 1.0 - (1.0 - level) / 2.0)) * spread
    return estimate_s - half, estimate_s + half


def time_batches(
    values: np.ndarray, times_s: FloatArray, batches: int = BATCHES
) -> list[np.ndarray]:
    """``values`` in time order, cut into up to ``batches`` batches of equal count (fewer when
    they would hold under MIN_BATCH_SAMPLES each)."""
    ordered = values[np.argsort(times_s, kind="stable")]
    count = max(1, min(batches, len(ordered) // MIN_BATCH_SAMPLES))
    edges = np.linspace(0, len(ordered), count + 1).astype(np.int64)
    return [ordered[a:b] for a, b in itertools.pairwise(edges) if b > a]


def clearly_above(samples: Samples, q: float, threshold_s: float, *, level: float = LEVEL) -> bool:
    """Whether the ``level`` interval of the ``q``-quantile over ``samples`` lies wholly above
    ``threshold_s`` (an early stop's test: a few milliseconds for 10^5 samples)."""
    found = quantile_interval([samples], q, level=level)
    return found.samples > 0 and found.low_s > threshold_s
