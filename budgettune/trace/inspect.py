"""Summary statistics of a trace: size, time span and rate, burstiness, length percentiles, the
share of prompts above common budgets, shared prefixes, and log-binned length histograms.

Pure functions over a :class:`Trace`; the CLI renders them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from budgettune.trace.prefix_blocks import unbounded_hit_share
from budgettune.trace.schema import IntArray, Trace

BUDGETS_TOKENS = (512, 2048, 8192)


@dataclass(slots=True, frozen=True)
class LengthStats:
    """Token-length summary; percentiles by linear interpolation (numpy's default)."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, values: npt.NDArray[np.int64]) -> LengthStats:
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return cls(float(values.mean()), float(p50), float(p90), float(p99), int(values.max()))

    def to_json(self) -> dict[str, float | int]:
        return {
            "mean": self.mean,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "max": self.max,
        }


@dataclass(slots=True, frozen=True)
class Histogram:
    """Counts of values in [edges[i], edges[i+1]) (the last bin includes its upper edge)."""

    edges: tuple[int, ...]
    counts: tuple[int, ...]


def log2_histogram(values: npt.NDArray[np.int64]) -> Histogram:
    """Bins at powers of two from the smallest to the largest value (at least one bin)."""
    low = 2 ** math.floor(math.log2(max(int(values.min()), 1)))
    high = 2 ** (math.floor(math.log2(max(int(values.max()), 1))) + 1)
    edges = [low]
    while edges[-1] < high:
        edges.append(edges[-1] * 2)
    counts, _ = np.histogram(values, bins=np.array(edges))
    return Histogram(tuple(edges), tuple(int(c) for c in counts))


@dataclass(slots=True, frozen=True)
class TraceStats:
    """What ``budgettune trace inspect`` shows. Time fields are None for a lengths-only trace;
    ``interarrival_cv`` (std / mean of the gaps, 1 for Poisson) needs at least two gaps.
    ``prompt_share_above``: fraction of prompts longer than each budget. ``shared_prefix_share``:
    fraction of requests with a shared prefix, None when the format does not record prefixes;
    ``shared_prefix_token_share``: the shared tokens' fraction of all prompt tokens;
    ``cache_hit_share``: the share of prompt tokens a prefix cache that never evicts would find
    cached (whole blocks of 16, each group's first request computed, requests in order)."""

    requests: int
    span_s: float | None
    rate_per_s: float | None
    interarrival_cv: float | None
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    prompt_share_above: tuple[tuple[int, float], ...]
    shared_prefix_share: float | None
    shared_prefix_token_share: float | None
    cache_hit_share: float | None
    prompt_histogram: Histogram
    output_histogram: Histogram

    def to_json(self) -> dict[str, Any]:
        """The ``inspect --json`` document (keys as documented in traces/README.md)."""
        return {
            "requests": self.requests,
            "span_s": self.span_s,
            "rate_per_s": self.rate_per_s,
            "interarrival_cv": self.interarrival_cv,
            "prompt_tokens": self.prompt_tokens.to_json(),
            "output_tokens": self.output_tokens.to_json(),
            "prompt_share_above": {str(budget): share for budget, share in self.prompt_share_above},
            "shared_prefix_share": self.shared_prefix_share,
            "shared_prefix_token_share": self.shared_prefix_token_share,
            "cache_hit_share": self.cache_hit_share,
        }


def shared_with_another(group: IntArray, tokens: IntArray) -> IntArray:
    """Each request's prefix tokens that another request of its group holds too: its prefix,
    cut at the longest prefix among the others (a conversation's last turn shares only the
    history the turn before it sent; a group of one shares nothing)."""
    out = np.zeros(len(group), dtype=np.int64)
    for g in np.unique(group[group >= 0]):
        members = np.flatnonzero(group == g)
        if len(members) < 2:
            continue
        lengths = tokens[members]
        order = np.argsort(lengths)[::-1]
        first, second = lengths[order[0]], lengths[order[1]]
        others_max = np.full(len(members), first)
        others_max[order[0]] = second  # the longest's others reach only the second longest
        out[members] = np.minimum(lengths, others_max)
    return out


def trace_stats(trace: Trace, budgets_tokens: tuple[int, ...] = BUDGETS_TOKENS) -> TraceStats:
    """Statistics of a non-empty trace."""
    if len(trace) == 0:
        raise ValueError("trace_stats needs at least one request")
    span_s = rate = cv = None
    if trace.arrival_s is not None:
        span_s = float(trace.arrival_s[-1] - trace.arrival_s[0])
        rate = (len(trace) - 1) / span_s if span_s > 0 else None
        gaps = np.diff(trace.arrival_s)
        if len(gaps) >= 2 and gaps.mean() > 0:
            cv = float(gaps.std() / gaps.mean())
    prompt = trace.prompt_tokens
    share = tuple((b, float(np.mean(prompt > b))) for b in budgets_tokens)
    prefix_share = prefix_token_share = None
    if trace.shared_blocks is not None:
        shared = trace.shared_blocks.shared_tokens(prompt)
        prefix_share = float(np.mean(shared > 0))
        prefix_token_share = float(shared.sum() / prompt.sum())
    elif trace.prefix_tokens is not None and trace.prefix_group is not None:
        shared = shared_with_another(trace.prefix_group, trace.prefix_tokens)
        prefix_share = float(np.mean(shared > 0))
        prefix_token_share = float(shared.sum() / prompt.sum())
    return TraceStats(
        requests=len(trace),
        span_s=span_s,
        rate_per_s=rate,
        interarrival_cv=cv,
        prompt_tokens=LengthStats.of(prompt),
        output_tokens=LengthStats.of(trace.output_tokens),
        prompt_share_above=share,
        shared_prefix_share=prefix_share,
        shared_prefix_token_share=prefix_token_share,
        cache_hit_share=unbounded_hit_share(
            prompt, trace.prefix_group, trace.prefix_tokens, shared=trace.shared_blocks
        ),
        prompt_histogram=log2_histogram(prompt),
        output_histogram=log2_histogram(trace.output_tokens),
    )
