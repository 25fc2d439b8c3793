"""`trace inspect` and `trace synth`: load-and-summarise, synthesize-and-write. No flag parsing,
no printing; warnings go to the caller's callback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from budgettune.trace.dists import LengthDist
from budgettune.trace.inspect import TraceStats, trace_stats
from budgettune.trace.load import load_trace
from budgettune.trace.schema import LoadReport
from budgettune.trace.synth import DEFAULT_THINK_TIME_S, synthesize, write_jsonl


def inspect_trace(
    path: str | Path,
    *,
    format: str | None = None,
    columns: str | None = None,
    max_model_len: int | None = None,
    on_long: str = "error",
    strict: bool = False,
    on_warning: Callable[[str], None] | None = None,
) -> tuple[TraceStats, LoadReport]:
    """Statistics of the trace at ``path`` and the report of its loading (see load_trace)."""
    trace, report = load_trace(
        path,
        format=format,
        columns=columns,
        max_model_len=max_model_len,
        on_long=on_long,
        strict=strict,
        on_warning=on_warning,
    )
    return trace_stats(trace), report


def synth_trace(
    output: str | Path,
    *,
    prompt_dist: LengthDist,
    output_dist: LengthDist,
    rate_per_s: float,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    arrivals: str = "poisson",
    burstiness: float = 1.0,
    prefix_groups: int = 0,
    prefix_tokens: int = 0,
    conversation_turns: int = 0,
    think_time_s: float = DEFAULT_THINK_TIME_S,
) -> TraceStats:
    """Synthesize a trace, write it to ``output`` ("-": stdout) as budgettune JSON Lines, and
    return its statistics."""
    trace = synthesize(
        prompt_dist=prompt_dist,
        output_dist=output_dist,
        rate_per_s=rate_per_s,
        requests=requests,
        duration_s=duration_s,
        seed=seed,
        arrivals=arrivals,
        burstiness=burstiness,
        prefix_groups=prefix_groups,
        prefix_tokens=prefix_tokens,
        conversation_turns=conversation_turns,
        think_time_s=think_time_s,
    )
    write_jsonl(trace, output)
    return trace_stats(trace)
