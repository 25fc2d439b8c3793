"""The send schedule: when each request goes out and how long its prompt and output are.

Both the simulator and the live load generator consume a :class:`Schedule`; nothing downstream
knows whether it came from a recorded trace or from synthetic arrivals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from budgettune.core.errors import SpecError
from budgettune.core.limits import (
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    MIN_RATE_PER_S,
    check_count,
    check_number,
)
from budgettune.trace.dists import LengthDist
from budgettune.trace.schema import SharedBlocks

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Parallel arrays, sorted by ``target_s`` (seconds from run start, first request near 0).

    prefix_group / prefix_tokens: requests of one group >= 0 share their first prefix_tokens
    prompt tokens; -1 means no shared prefix. shared_blocks: the exact blocks each request
    shares (:class:`~budgettune.trace.schema.SharedBlocks`), used instead of the groups when set.
    """

    target_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    prefix_group: IntArray | None = None
    prefix_tokens: IntArray | None = None
    shared_blocks: SharedBlocks | None = None

    def __len__(self) -> int:
        return len(self.target_s)

    @property
    def rate_per_s(self) -> float:
        """Mean arrival rate over the span (requests - 1) / span; inf for one request."""
        if len(self) < 2:
            return float("inf")
        span = float(self.target_s[-1] - self.target_s[0])
        return (len(self) - 1) / span if span > 0 else float("inf")


def check_burstiness(burstiness: float, mode: str) -> None:
    """Burstiness shapes gamma arrivals only: with any other mode it would be silently
    ignored, so it is refused (SpecError on field ``burstiness``)."""
    if burstiness != 1.0 and mode != "gamma":
        raise SpecError(
            f"applies to --arrivals gamma only, not {mode} (add --arrivals gamma)",
            field="burstiness",
        )


def arrival_times_s(
    rng: np.random.Generator,
    n: int,
    rate_per_s: float,
    *,
    process: str = "poisson",
    burstiness: float = 1.0,
) -> FloatArray:
    """``n`` arrival times in seconds, the first at 0 and the last at (n - 1) / rate: the
    schedule's realised rate (:attr:`Schedule.rate_per_s`) is the rate asked.

    Drawn gaps are scaled together so that they span exactly that: for Poisson arrivals this is
    the process conditioned on its count (the arrivals between the first and the last are then
    sorted uniforms), and ``gamma`` keeps its shape. Unscaled, 200 Poisson arrivals at 2.5/s
    realised 2.21/s and seed 0 of 8/s realised 7.07: a pass measured 12% lighter than asked.

    ``gamma`` follows ``vllm bench serve --burstiness``: the gaps' gamma shape is ``burstiness``,
    so 1 is Poisson, below 1 burstier (CV = 1 / sqrt(burstiness)), above 1 more regular.
    """
    check_number(
        rate_per_s, field="rate", maximum=MAX_RATE_PER_S, minimum=MIN_RATE_PER_S,
        inclusive_minimum=True, what="requests/s",
    )  # fmt: skip
    check_count(n, field="requests", maximum=MAX_REQUESTS, minimum=0)
    if n <= 0:
        return np.empty(0)
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate_per_s, size=n)
    elif process == "gamma":
        if not burstiness > 0:
            raise SpecError(f"must be positive, got {burstiness!r}", field="burstiness")
        shape = burstiness
        gaps = rng.gamma(shape, 1.0 / (rate_per_s * shape), size=n)
    else:
        raise SpecError(
            f"unknown arrival process {process!r}; use poisson or gamma", field="arrivals"
        )
    gaps[0] = 0.0
    times = np.cumsum(gaps)
    if n >= 2 and times[-1] > 0:
        times *= ((n - 1) / rate_per_s) / times[-1]
    return times


def synthetic_schedule(
    *,
    prompt_dist: LengthDist,
    output_dist: LengthDist,
    rate_per_s: float,
    requests: int,
    seed: int = 0,
    process: str = "poisson",
    burstiness: float = 1.0,
) -> Schedule:
    """A seeded schedule with lengths from two distributions and the given arrival process."""
    check_count(requests, field="requests", maximum=MAX_REQUESTS, what="requests")
    rng = np.random.default_rng(seed)
    times = arrival_times_s(rng, requests, rate_per_s, process=process, burstiness=burstiness)
    return Schedule(
        target_s=times,
        prompt_tokens=prompt_dist.sample(rng, requests),
        output_tokens=output_dist.sample(rng, requests),
    )


def bounded_arrival_times_s(
    rng: np.random.Generator,
    rate_per_s: float,
    *,
    requests: int | None = None,
    duration_s: float | None = None,
    process: str = "poisson",
    burstiness: float = 1.0,
) -> FloatArray:
    """Arrival times (first at 0) for ``requests`` arrivals, or for all arrivals before
    ``duration_s``, or both bounds at once. With ``requests`` alone this equals
    :func:`arrival_times_s` for the same generator state."""
    if requests is None and duration_s is None:
        raise SpecError(
            "give at least one of --requests and --duration to bound the run", field="requests"
        )
    if requests is not None:
        check_count(requests, field="requests", maximum=MAX_REQUESTS, what="requests")
    check_number(
        rate_per_s, field="rate", maximum=MAX_RATE_PER_S, minimum=MIN_RATE_PER_S,
        inclusive_minimum=True, what="requests/s",
    )  # fmt: skip
    if duration_s is None:
        assert requests is not None
        return arrival_times_s(rng, requests, rate_per_s, process=process, burstiness=burstiness)
    if not duration_s > 0:
        raise SpecError(f"must be positive, got {duration_s!r}", field="duration")
    expected = rate_per_s * duration_s
    if requests is None and expected > MAX_REQUESTS:
        raise SpecError(
            f"{duration_s:g} s at {rate_per_s:g} requests/s is about {expected:,.0f} requests; "
            f"budgettune sends at most {MAX_REQUESTS:,} in one run",
            field="duration",
        )
    # draw in chunks until past the duration; the gaps after the first chunk continue from it
    chunk = max(64, int(rate_per_s * duration_s * 1.1) + 64)
    if requests is not None:
        chunk = min(chunk, requests)
    times = arrival_times_s(rng, chunk, rate_per_s, process=process, burstiness=burstiness)
    while times[-1] < duration_s and (requests is None or len(times) < requests):
        more = arrival_times_s(rng, chunk + 1, rate_per_s, process=process, burstiness=burstiness)
        times = np.concatenate([times, times[-1] + more[1:]])
    times = times[times < duration_s]
    return times[:requests] if requests is not None else times
