"""The traffic a command sends, from the options ``simulate``, ``replay``, ``sweep`` and ``trace
synth`` share: :class:`TrafficRequest` (the options as given) -> :func:`build_traffic` -> a
:class:`Traffic` (the schedule, its description, and the same traffic at another rate).

Errors name the request's field (``rate``, ``max_model_len``), never a flag."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from budgettune.app.requests import DEFAULT_OUTPUT_DIST, DEFAULT_PROMPT_DIST, TrafficRequest
from budgettune.core.errors import SpecError
from budgettune.core.limits import (
    MAX_DURATION_S,
    MAX_RATE_PER_S,
    MAX_REQUESTS,
    MIN_RATE_PER_S,
    check_count,
)
from budgettune.core.units import parse_duration_s, parse_positive_float, parse_tokens
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.load import ON_LONG as ON_LONG_CHOICES
from budgettune.trace.load import clip_to_context, load_trace
from budgettune.trace.replay import ReplayOptions, parse_window, schedule_from_trace
from budgettune.trace.schedule import Schedule, arrival_times_s
from budgettune.trace.schema import LoadReport
from budgettune.trace.synth import synthesize

REPLAY_SEED_SALT = 7_919  # re-measures' arrival draws never repeat the first replay's
# --time-scale and --burstiness: a factor, far past any use either way (--time-scale 1e-300
# stretched a trace's gaps past any run's length and printed p50s of 0.0 ms)
MAX_SCALE = 1e6
MIN_SCALE = 1 / MAX_SCALE


@dataclass(slots=True, frozen=True)
class Traffic:
    """The schedule to send, the load report when it came from a trace (None for synthetic
    traffic), a one-line description for logs and results, and ``at_rate(r)``: the same traffic
    at another mean rate (a recorded trace rescaled, new Poisson/gamma draws otherwise), for
    rate searches that must not reload the trace."""

    schedule: Schedule
    report: LoadReport | None
    description: str
    rebuild: Callable[[float], Schedule]
    # How arrivals are drawn: (process, rate, burstiness), None when they are recorded (a
    # trace's own times replay as they are).
    drawn: tuple[str, float, float] | None = None
    seed: int = 0

    def at_rate(self, rate_per_s: float) -> Schedule:
        """The schedule at ``rate_per_s`` requests/s, all else (seed, bounds) unchanged."""
        return self.rebuild(
            parse_positive_float(
                rate_per_s, field="rate", maximum=MAX_RATE_PER_S, minimum=MIN_RATE_PER_S
            )
        )

    def reseeded(self, replay: int) -> Schedule:
        """The same requests (lengths, order) with arrival times drawn afresh for re-measure
        ``replay`` (1, 2, ...): another stretch of the same arrival process. Recorded arrivals
        are replayed as recorded."""
        if self.drawn is None:
            return self.schedule
        process, rate_per_s, burstiness = self.drawn
        rng = np.random.default_rng([self.seed, REPLAY_SEED_SALT, replay])
        times = arrival_times_s(
            rng, len(self.schedule), rate_per_s, process=process, burstiness=burstiness
        )
        return replace(self.schedule, target_s=times)


def max_model_len_tokens(request: TrafficRequest) -> int | None:
    """The context limit the request gives, in tokens (``32K`` is 32768), or None."""
    if request.max_model_len is None:
        return None
    return parse_tokens(str(request.max_model_len), field="max_model_len")


def build_traffic(
    request: TrafficRequest,
    *,
    default_requests: int | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Traffic:
    """The traffic to send.

    With ``request.trace``: load it and replay it (see :class:`ReplayOptions`). Without:
    synthetic Poisson/gamma traffic at ``rate`` from the two length distributions, bounded by
    ``requests``, ``duration`` or else ``default_requests``. Raises UserError subclasses naming
    the field."""
    duration_s = parse_duration_s(request.duration, field="duration") if request.duration else None
    rate = (
        None
        if request.rate is None
        else parse_positive_float(
            request.rate, field="rate", maximum=MAX_RATE_PER_S, minimum=MIN_RATE_PER_S
        )
    )
    burstiness, time_scale = (
        parse_positive_float(value, field=field, maximum=MAX_SCALE, minimum=MIN_SCALE)
        for value, field in ((request.burstiness, "burstiness"), (request.time_scale, "time_scale"))
    )
    if request.requests is not None:
        check_count(request.requests, field="requests", maximum=MAX_REQUESTS, what="requests")
    check_count(request.seed, field="seed", minimum=0, maximum=2**64 - 1)
    if request.on_long not in ON_LONG_CHOICES:
        raise SpecError(
            f"unknown value {request.on_long!r}; use one of {', '.join(ON_LONG_CHOICES)}",
            field="on_long",
        )
    max_len = max_model_len_tokens(request)
    if max_len is not None and max_len < 2:
        raise SpecError(
            f"must be at least 2 tokens, got {request.max_model_len!r}", field="max_model_len"
        )
    checked = replace(request, rate=rate, burstiness=burstiness, time_scale=time_scale)
    if request.trace is None:
        for field, value in (
            ("format", request.format),
            ("columns", request.columns),
            ("strict", request.strict),
        ):
            if value:
                raise SpecError("applies to --trace only", field=field)
        return _synthetic(checked, default_requests, duration_s, max_len, on_warning)
    if request.prompt_dist is not None or request.output_dist is not None:
        field = "prompt_dist" if request.prompt_dist is not None else "output_dist"
        raise SpecError("not with --trace (the trace gives lengths)", field=field)
    return _replayed(checked, request.trace, duration_s, max_len, on_warning)


def _replayed(
    request: TrafficRequest,
    trace: Path,
    duration_s: float | None,
    max_len: int | None,
    on_warning: Callable[[str], None] | None,
) -> Traffic:
    """A trace loaded and re-timed as the request says."""
    loaded, report = load_trace(
        trace,
        format=request.format,
        columns=request.columns,
        max_model_len=max_len,
        on_long=request.on_long,
        strict=request.strict,
        on_warning=on_warning,
    )
    rate, time_scale = request.rate, request.time_scale
    options = ReplayOptions(
        arrivals=request.arrivals,
        rate_per_s=rate,
        burstiness=request.burstiness,
        time_scale=time_scale,
        window_s=parse_window(request.window) if request.window else None,
        requests=request.requests,
        duration_s=duration_s,
        seed=request.seed,
    )
    schedule = schedule_from_trace(loaded, options)
    mode = request.arrivals or ("recorded" if loaded.has_arrivals else "poisson")
    how = mode
    if mode == "recorded" and rate is not None:
        how += f" rescaled to {rate:g}/s"
    elif mode == "recorded" and time_scale != 1.0:
        how += f" x{time_scale:g}"
    elif mode != "recorded":
        how += f" at {rate:g}/s"
    description = f"{Path(str(trace)).name} ({report.format}), {how}, {len(schedule):,} requests"

    def rebuild(rate_per_s: float) -> Schedule:
        again = replace(options, rate_per_s=rate_per_s, time_scale=1.0)
        return schedule_from_trace(loaded, again)

    drawn = None
    if mode != "recorded":
        assert rate is not None  # a drawn process needs a rate (schedule_from_trace checked)
        drawn = (mode.strip().lower(), rate, request.burstiness)
    return Traffic(schedule, report, description, rebuild, drawn, request.seed)


def _synthetic(
    request: TrafficRequest,
    default_requests: int | None,
    duration_s: float | None,
    max_len: int | None,
    on_warning: Callable[[str], None] | None,
) -> Traffic:
    """Seeded Poisson/gamma traffic from two length distributions. With ``max_len`` (the
    engine's context), requests longer than it are dropped (``on_long`` drop) or else clipped:
    the distributions are ours, so there is nothing to refuse."""
    if request.window:
        raise SpecError("applies to --trace only", field="window")
    if request.time_scale != 1.0:
        raise SpecError("applies to recorded traces only (give --trace)", field="time_scale")
    arrivals = request.arrivals
    process = (arrivals or "poisson").strip().lower()
    if process == "recorded":
        raise SpecError("recorded needs --trace FILE", field="arrivals")
    if process not in ("poisson", "gamma"):
        raise SpecError(f"unknown mode {arrivals!r}; use poisson or gamma", field="arrivals")
    rate = request.rate
    if rate is None:
        raise SpecError("required for synthetic traffic (or give --trace FILE)", field="rate")
    prompt = parse_length_dist(request.prompt_dist or DEFAULT_PROMPT_DIST, field="prompt_dist")
    output = parse_length_dist(request.output_dist or DEFAULT_OUTPUT_DIST, field="output_dist")
    requests = request.requests or default_requests
    on_long = request.on_long

    def rebuild(rate_per_s: float) -> Schedule:
        trace = synthesize(
            prompt_dist=prompt,
            output_dist=output,
            rate_per_s=rate_per_s,
            requests=requests,
            duration_s=duration_s,
            seed=request.seed,
            arrivals=process,
            burstiness=request.burstiness,
        )
        assert trace.arrival_s is not None
        times, prompts, outputs = trace.arrival_s, trace.prompt_tokens, trace.output_tokens
        if max_len is not None:
            too_long = prompts + outputs > max_len
            fitted[0] = int(too_long.sum())
            if on_long == "drop":
                times, prompts, outputs = times[~too_long], prompts[~too_long], outputs[~too_long]
            else:
                prompts, outputs = clip_to_context(prompts, outputs, max_len)
        return Schedule(target_s=times, prompt_tokens=prompts, output_tokens=outputs)

    fitted = [0]
    schedule = rebuild(rate)
    if not len(schedule):
        raise SpecError(f"every synthetic request exceeds {max_len}", field="max_model_len")
    description = (
        f"synthetic {process} at {rate:g}/s, prompt {prompt.spec}, output {output.spec}, "
        f"{len(schedule):,} requests"
    )
    if fitted[0] and on_warning is not None:
        done = "dropped" if on_long == "drop" else "clipped"
        on_warning(f"{done} {fitted[0]:,} synthetic requests longer than --max-model-len {max_len}")
    return Traffic(schedule, None, description, rebuild, (process, rate, request.burstiness),
                   request.seed)  # fmt: skip


def check_live_span(traffic: Traffic, request: TrafficRequest) -> None:
    """Refuse traffic a live replay would take more than a week to send (a run takes at most
    MAX_DURATION_S: ``--time-scale 1e-6`` on a 2 s trace is 23 days), naming the option that
    stretched it. The simulator takes any span: it does not wait for one."""
    schedule = traffic.schedule
    span_s = float(schedule.target_s[-1] - schedule.target_s[0]) if len(schedule) else 0.0
    if span_s > MAX_DURATION_S:
        stretched = request.time_scale != 1.0
        field = "time_scale" if stretched else "rate" if request.rate is not None else "trace"
        raise SpecError(
            f"the replay would run {span_s / 86_400:,.0f} days; a run takes at most 7 days",
            field=field,
        )
