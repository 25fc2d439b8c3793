"""Traffic options shared by ``simulate``, ``replay``, ``sweep`` and ``trace synth``: typer.Option
constants and one function turning their values into a send schedule.

Usage in a command (the parameter names are the keyword names of :func:`traffic_from_options`)::

    def simulate(..., trace: Path | None = TRACE, format: str | None = FORMAT, ...,
                 rate: float | None = RATE, seed: int = SEED) -> None:
        traffic = traffic_from_options(trace=trace, format=format, ..., rate=rate, seed=seed,
                                       on_warning=warn)
        traffic.schedule  # -> Schedule
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import typer

from budgettune.core.errors import SpecError
from budgettune.core.units import parse_duration_s, parse_positive_float, parse_tokens
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.formats import FORMATS
from budgettune.trace.load import ON_LONG as ON_LONG_CHOICES
from budgettune.trace.load import clip_to_context, load_trace
from budgettune.trace.replay import ReplayOptions, parse_window, schedule_from_trace
from budgettune.trace.schedule import Schedule
from budgettune.trace.schema import LoadReport
from budgettune.trace.synth import synthesize

PANEL = "Traffic"
DEFAULT_PROMPT_DIST = "lognormal:mean=1000,sigma=1.0,max=8192"
DEFAULT_OUTPUT_DIST = "lognormal:mean=250,sigma=1.0,max=2048"

TRACE = typer.Option(
    None,
    "--trace",
    help="Trace file to replay (format detected from content; .gz read transparently). "
    "Replaces --prompt-dist/--output-dist. Default: none (synthetic traffic).",
    rich_help_panel=PANEL,
)
FORMAT = typer.Option(
    None,
    "--format",
    help=f"Trace format, when detection is not wanted: {', '.join(FORMATS)}. "
    "Default: detected from content.",
    rich_help_panel=PANEL,
)
COLUMNS = typer.Option(
    None,
    "--columns",
    help="Columns of a plain CSV trace: arrival=COL,prompt=COL,output=COL "
    "(also arrival_ms, prefix_group, prefix_tokens). Implies --format csv. Default: none.",
    rich_help_panel=PANEL,
)
ARRIVALS = typer.Option(
    None,
    "--arrivals",
    help="recorded (the trace's own times; default when it has them) | poisson | gamma.",
    rich_help_panel=PANEL,
)
RATE = typer.Option(
    None,
    "--rate",
    help="Mean arrival rate, requests/s. With recorded arrivals: rescale the trace to this rate. "
    "Default: the trace's own rate; synthetic traffic: sweep 8, replay required.",
    rich_help_panel=PANEL,
)
BURSTINESS = typer.Option(
    1.0,
    "--burstiness",
    help="Gamma arrivals' shape (as vllm bench serve): 1 = Poisson, < 1 burstier, > 1 smoother.",
    rich_help_panel=PANEL,
)
TIME_SCALE = typer.Option(
    1.0,
    "--time-scale",
    help="Recorded arrivals only: replay k times faster (gaps divided by k).",
    rich_help_panel=PANEL,
)
WINDOW = typer.Option(
    None,
    "--window",
    help="START:END slice of the trace by arrival time, e.g. 10m:20m or :300 (a bare number is "
    "seconds). Default: the whole trace.",
    rich_help_panel=PANEL,
)
REQUESTS = typer.Option(
    None,
    "--requests",
    help="Number of requests. Default: the whole trace; synthetic traffic: sweep 240, replay "
    "200; trace synth needs this or --duration.",
    rich_help_panel=PANEL,
)
DURATION = typer.Option(
    None,
    "--duration",
    help="Only requests sent before this, e.g. 60s or 10m (a bare number is seconds). "
    "Default: no limit.",
    rich_help_panel=PANEL,
)
MAX_MODEL_LEN = typer.Option(
    None,
    "--max-model-len",
    help="Context limit in tokens (e.g. 8192 or 32K; K = 1024, k = 1000, as vLLM reads it): trace "
    "requests with prompt + output above it follow --on-long; synthetic ones are clipped "
    "(dropped with --on-long drop). Default: no limit.",
    rich_help_panel=PANEL,
)
ON_LONG = typer.Option(
    "error",
    "--on-long",
    help="Requests with prompt + output above --max-model-len: clip | drop | error.",
    rich_help_panel=PANEL,
)
STRICT = typer.Option(
    False,
    "--strict",
    help="Refuse a trace whose timestamps go backwards instead of sorting it.",
    rich_help_panel=PANEL,
)
SEED = typer.Option(0, "--seed", help="Seed of every random draw.", rich_help_panel=PANEL)
PROMPT_DIST = typer.Option(
    None,
    "--prompt-dist",
    help=f"Prompt length distribution in tokens, without a trace (default {DEFAULT_PROMPT_DIST}).",
    rich_help_panel=PANEL,
)
OUTPUT_DIST = typer.Option(
    None,
    "--output-dist",
    help=f"Output length distribution in tokens, without a trace (default {DEFAULT_OUTPUT_DIST}).",
    rich_help_panel=PANEL,
)


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

    def at_rate(self, rate_per_s: float) -> Schedule:
        """The schedule at ``rate_per_s`` requests/s, all else (seed, bounds) unchanged."""
        return self.rebuild(parse_positive_float(rate_per_s, field="--rate"))


def traffic_from_options(
    *,
    trace: Path | str | None = None,
    format: str | None = None,
    columns: str | None = None,
    arrivals: str | None = None,
    rate: float | None = None,
    burstiness: float = 1.0,
    time_scale: float = 1.0,
    window: str | None = None,
    requests: int | None = None,
    duration: str | None = None,
    max_model_len: str | int | None = None,
    on_long: str = "error",
    strict: bool = False,
    seed: int = 0,
    prompt_dist: str | None = None,
    output_dist: str | None = None,
    default_requests: int | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> Traffic:
    """Turn the option values (as typer hands them) into the traffic to send.

    With ``trace``: load it and replay it (see :class:`ReplayOptions`). Without: synthetic
    Poisson/gamma traffic at ``rate`` from the two length distributions, bounded by
    ``requests``, ``duration`` or else ``default_requests``. Raises UserError subclasses.
    """
    duration_s = parse_duration_s(duration, field="--duration") if duration else None
    if rate is not None:
        rate = parse_positive_float(rate, field="--rate")
    burstiness = parse_positive_float(burstiness, field="--burstiness")
    time_scale = parse_positive_float(time_scale, field="--time-scale")
    if requests is not None and requests <= 0:
        raise SpecError(f"--requests: must be positive, got {requests}")
    if on_long not in ON_LONG_CHOICES:
        raise SpecError(
            f"--on-long: unknown value {on_long!r}; use one of {', '.join(ON_LONG_CHOICES)}"
        )
    max_len = (
        parse_tokens(str(max_model_len), field="--max-model-len")
        if max_model_len is not None
        else None
    )
    if max_len is not None and max_len < 2:
        raise SpecError(f"--max-model-len: must be at least 2 tokens, got {max_model_len!r}")
    if trace is None:
        for name, value in (("--format", format), ("--columns", columns), ("--strict", strict)):
            if value:
                raise SpecError(f"{name}: applies to --trace only")
        return _synthetic(
            arrivals,
            rate,
            burstiness,
            time_scale,
            window,
            requests or default_requests,
            duration_s,
            seed,
            prompt_dist,
            output_dist,
            max_len,
            on_long,
            on_warning,
        )
    if prompt_dist is not None or output_dist is not None:
        raise SpecError("--prompt-dist/--output-dist: not with --trace (the trace gives lengths)")
    loaded, report = load_trace(
        trace,
        format=format,
        columns=columns,
        max_model_len=max_len,
        on_long=on_long,
        strict=strict,
        on_warning=on_warning,
    )
    options = ReplayOptions(
        arrivals=arrivals,
        rate_per_s=rate,
        burstiness=burstiness,
        time_scale=time_scale,
        window_s=parse_window(window) if window else None,
        requests=requests,
        duration_s=duration_s,
        seed=seed,
    )
    schedule = schedule_from_trace(loaded, options)
    mode = arrivals or ("recorded" if loaded.has_arrivals else "poisson")
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

    return Traffic(schedule, report, description, rebuild)


def schedule_from_options(**values: object) -> Schedule:
    """:func:`traffic_from_options` for callers that want only the schedule."""
    return traffic_from_options(**values).schedule  # type: ignore[arg-type]


def _synthetic(
    arrivals: str | None,
    rate: float | None,
    burstiness: float,
    time_scale: float,
    window: str | None,
    requests: int | None,
    duration_s: float | None,
    seed: int,
    prompt_dist: str | None,
    output_dist: str | None,
    max_len: int | None,
    on_long: str,
    on_warning: Callable[[str], None] | None,
) -> Traffic:
    """Seeded Poisson/gamma traffic from two length distributions. With ``max_len`` (the
    engine's context), requests longer than it are dropped (``on_long`` drop) or else clipped:
    the distributions are ours, so there is nothing to refuse."""
    if window:
        raise SpecError("--window: applies to --trace only")
    if time_scale != 1.0:
        raise SpecError("--time-scale: applies to recorded traces only (give --trace)")
    process = (arrivals or "poisson").strip().lower()
    if process == "recorded":
        raise SpecError("--arrivals recorded: needs --trace FILE")
    if process not in ("poisson", "gamma"):
        raise SpecError(f"--arrivals: unknown mode {arrivals!r}; use poisson or gamma")
    if rate is None:
        raise SpecError("--rate: required for synthetic traffic (or give --trace FILE)")
    prompt = parse_length_dist(prompt_dist or DEFAULT_PROMPT_DIST, option="--prompt-dist")
    output = parse_length_dist(output_dist or DEFAULT_OUTPUT_DIST, option="--output-dist")

    def rebuild(rate_per_s: float) -> Schedule:
        trace = synthesize(
            prompt_dist=prompt,
            output_dist=output,
            rate_per_s=rate_per_s,
            requests=requests,
            duration_s=duration_s,
            seed=seed,
            arrivals=process,
            burstiness=burstiness,
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
        raise SpecError(f"--max-model-len: every synthetic request exceeds {max_len}")
    description = (
        f"synthetic {process} at {rate:g}/s, prompt {prompt.spec}, output {output.spec}, "
        f"{len(schedule):,} requests"
    )
    if fitted[0] and on_warning is not None:
        done = "dropped" if on_long == "drop" else "clipped"
        on_warning(f"{done} {fitted[0]:,} synthetic requests longer than --max-model-len {max_len}")
    return Traffic(schedule, None, description, rebuild)
