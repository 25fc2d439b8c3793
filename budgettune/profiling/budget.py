"""A time budget for `budgettune profile`'s probes (``--time-budget``): what each decode or mixed
probe will cost, estimated from the prefill series already measured, so that the probes after it
run cheapest first and the ones that no longer fit the budget are skipped (and listed).

What makes a probe expensive is its set-up, not its timing: b decoders at context L must first
have b x L prompt tokens prefilled. On the vLLM CPU build with the tiny model, 64 decoders at
2048 tokens took 55 s of a 343 s profile (decode 203 s, mixed 123 s, prefill 18 s), while the same
probe on a GPU takes seconds. The estimate is deliberately rough: it ranks the probes and bounds
the total; it does not predict any measured figure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from budgettune.model.profile import Probe
from budgettune.profiling.plan import ProbeSpec

STEADY_MIN_ITERATIONS = 64  # the decode timer's steady window, at least (profiling/measure.py)
STEADY_PER_REPEAT = 20
MIXED_ITERATIONS_PER_REPEAT = 6  # spacing between injected prompts, and the prompt's own


def prefill_rate(prefill: Sequence[Probe]) -> tuple[float, float] | None:
    """(tokens per second of the largest prefill measured, seconds of the smallest): the
    engine's prompt throughput and its floor per iteration; None before any prefill."""
    timed = [p for p in prefill if p.times_s and p.prompt_tokens > 0]
    if not timed:
        return None
    largest = max(timed, key=lambda p: p.prompt_tokens)
    smallest = min(timed, key=lambda p: p.prompt_tokens)
    largest_s = statistics.median(largest.times_s)
    return largest.prompt_tokens / max(largest_s, 1e-9), statistics.median(smallest.times_s)


def probe_cost_s(spec: ProbeSpec, prefill: Sequence[Probe], repeats: int) -> float:
    """Seconds ``spec`` will take, roughly: its decoders' prompts prefilled at the measured
    prompt throughput, then the iterations it times, each about one small iteration plus one
    prompt token's worth per decoder. Prefill probes (and any probe before a prefill was
    measured) cost 0: they always run."""
    rate = prefill_rate(prefill)
    if rate is None or spec.series == "prefill":
        return 0.0
    tokens_per_s, floor_s = rate
    step_s = floor_s + spec.batch / tokens_per_s
    setup_s = spec.batch * spec.context_tokens / tokens_per_s
    if spec.series == "decode":
        iterations = max(STEADY_PER_REPEAT * repeats, STEADY_MIN_ITERATIONS) + 2
        return setup_s + iterations * step_s
    injected_s = spec.prompt_tokens / tokens_per_s
    return setup_s + repeats * (injected_s + MIXED_ITERATIONS_PER_REPEAT * step_s)
