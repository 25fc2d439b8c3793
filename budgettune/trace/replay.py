"""Turn a trace plus a replay mode into the send :class:`Schedule` that the simulator and the live
load generator consume.

Modes: ``recorded`` (the trace's own gaps, optionally sped up), ``poisson`` and ``gamma`` (new
seeded arrival times at a given rate, lengths drawn from the trace's joint (prompt, output)
distribution, i.e. whole rows resampled with replacement).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from budgettune.core.errors import SpecError
from budgettune.core.units import parse_duration_s
from budgettune.trace.schedule import Schedule, bounded_arrival_times_s, check_burstiness
from budgettune.trace.schema import Trace

ARRIVALS = ("recorded", "poisson", "gamma")


@dataclass(slots=True, frozen=True)
class ReplayOptions:
    """How to replay a trace.

    arrivals: None picks ``recorded`` when the trace has timestamps, else ``poisson``.
    rate_per_s: required for poisson/gamma; with recorded it rescales the recorded gaps so that
    the mean rate becomes this (like a time scale of rate / recorded rate).
    time_scale: recorded only; k > 1 replays k times faster (gaps divided by k).
    window_s: (start, end) seconds from the trace's first request; only rows arriving in
    [start, end) are used, in every mode.
    requests / duration_s: bounds on the schedule (the first N; those before D seconds).
    """

    arrivals: str | None = None
    rate_per_s: float | None = None
    burstiness: float = 1.0
    time_scale: float = 1.0
    window_s: tuple[float, float] | None = None
    requests: int | None = None
    duration_s: float | None = None
    seed: int = 0


def parse_window(text: str) -> tuple[float, float]:
    """Parse a window ``START:END`` (durations: "600:1200", "10m:20m", ":5m", "1h:") into
    seconds; an open end is infinite. Raises SpecError on field ``window``."""
    start_text, colon, end_text = str(text).partition(":")
    if not colon:
        raise SpecError(
            f"{text!r} is not START:END (e.g. 10m:20m, or :300s for the start)", field="window"
        )
    # a window may start where the trace does ("0", "0s"); its end comes after the start
    start = _window_bound(start_text, "start", allow_zero=True) if start_text.strip() else 0.0
    end = _window_bound(end_text, "end") if end_text.strip() else float("inf")
    if not end > start:
        raise SpecError(f"end must come after start, got {text!r}", field="window")
    return start, end


def _window_bound(text: str, which: str, *, allow_zero: bool = False) -> float:
    """One end of a window in seconds; the error says which end it is."""
    try:
        return parse_duration_s(text, field="window", allow_zero=allow_zero)
    except SpecError as error:
        raise SpecError(f"{which}: {error.message}", field="window") from None


def _resolve_mode(trace: Trace, options: ReplayOptions) -> str:
    mode = options.arrivals
    if mode is None:
        if trace.has_arrivals:
            return "recorded"
        if options.rate_per_s is None:
            raise SpecError(
                f"{trace.source or 'the trace'} has no timestamps; give --rate R for "
                "Poisson arrivals (or --arrivals gamma --rate R --burstiness B)",
                field="rate",
            )
        return "poisson"
    mode = mode.strip().lower()
    if mode not in ARRIVALS:
        raise SpecError(
            f"unknown mode {options.arrivals!r}; use one of {', '.join(ARRIVALS)}",
            field="arrivals",
        )
    if mode == "recorded" and not trace.has_arrivals:
        raise SpecError(
            f"{trace.source or 'the trace'} has no timestamps to replay as recorded; "
            "use --arrivals poisson --rate R",
            field="arrivals",
        )
    if mode != "recorded" and options.rate_per_s is None:
        raise SpecError(f"required with --arrivals {mode}", field="rate")
    return mode


def schedule_from_trace(trace: Trace, options: ReplayOptions) -> Schedule:
    """The send schedule for ``trace`` replayed as ``options`` says. Deterministic in
    ``options.seed``. Raises SpecError for contradictory or impossible options."""
    mode = _resolve_mode(trace, options)
    check_burstiness(options.burstiness, mode)
    if options.time_scale != 1.0 and mode != "recorded":
        raise SpecError(
            "applies to --arrivals recorded only; use --rate instead", field="time_scale"
        )
    if not options.time_scale > 0:
        raise SpecError(f"must be positive, got {options.time_scale!r}", field="time_scale")
    if options.requests is not None and options.requests <= 0:
        raise SpecError(f"must be positive, got {options.requests!r}", field="requests")
    source = _window(trace, options.window_s)
    if mode == "recorded":
        return _recorded(source, options)
    rng = np.random.default_rng(options.seed)
    assert options.rate_per_s is not None
    requests = options.requests
    if requests is None and options.duration_s is None:
        requests = len(source)
    times = bounded_arrival_times_s(
        rng,
        options.rate_per_s,
        requests=requests,
        duration_s=options.duration_s,
        process=mode,
        burstiness=options.burstiness,
    )
    rows = rng.integers(0, len(source), size=len(times))
    return _schedule(source, rows, times)


def _window(trace: Trace, window_s: tuple[float, float] | None) -> Trace:
    if window_s is None:
        return trace
    if trace.arrival_s is None:
        raise SpecError(f"{trace.source or 'the trace'} has no timestamps to slice", field="window")
    start, end = window_s
    inside = (trace.arrival_s >= start) & (trace.arrival_s < end)
    if not inside.any():
        raise SpecError(
            f"no requests arrive in [{start:g} s, {end:g} s); the trace spans "
            f"0 to {float(trace.arrival_s[-1]):.1f} s",
            field="window",
        )
    return trace.take(inside)


def _recorded(source: Trace, options: ReplayOptions) -> Schedule:
    assert source.arrival_s is not None
    times = source.arrival_s - source.arrival_s[0]
    scale = options.time_scale
    if options.rate_per_s is not None:
        if scale != 1.0:
            raise SpecError(
                "give --rate or --time-scale for recorded arrivals, not both", field="rate"
            )
        if not options.rate_per_s > 0:
            raise SpecError(f"must be positive, got {options.rate_per_s!r}", field="rate")
        if len(times) < 2 or times[-1] <= 0:
            raise SpecError("the recorded trace has no time span to rescale", field="rate")
        scale = options.rate_per_s / ((len(times) - 1) / float(times[-1]))
    times = times / scale
    keep = len(times)
    if options.requests is not None:
        if options.requests > len(times):
            raise SpecError(
                f"the recorded trace has only {len(times):,} requests "
                f"(asked for {options.requests:,}); use --arrivals poisson to draw more",
                field="requests",
            )
        keep = options.requests
    if options.duration_s is not None:
        keep = min(keep, int(np.searchsorted(times, options.duration_s, side="left")))
    keep = max(keep, 1)  # the first request is at 0 s, inside any positive duration
    rows = np.arange(keep)
    return _schedule(source, rows, times[:keep])


def _schedule(source: Trace, rows: np.ndarray, times: np.ndarray) -> Schedule:
    def pick(column: np.ndarray | None) -> np.ndarray | None:
        return None if column is None else column[rows]

    return Schedule(
        target_s=np.asarray(times, dtype=np.float64),
        prompt_tokens=source.prompt_tokens[rows],
        output_tokens=source.output_tokens[rows],
        prefix_group=pick(source.prefix_group),
        prefix_tokens=pick(source.prefix_tokens),
        shared_blocks=None if source.shared_blocks is None else source.shared_blocks.take(rows),
    )
