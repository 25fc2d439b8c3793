"""What `budgettune profile` probes and in which order: the probe grid of the three series, the
timer protocol every measurement path implements, and the loop that runs the probes.

The loop keeps what it measured when a probe fails, so a partial profile can still be saved.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from budgettune.core.errors import BudgettuneError, EngineError
from budgettune.model.profile import EngineInfo, Hardware, Probe

# Prefill sizes: every 32 (48 too) below 512, where ridges of common model/GPU pairs lie (A100
# and 8B: ~115 tokens), then multiples of 128 growing roughly geometrically. Tile probes sit one
# token above round sizes.
PREFILL_GRID = (
    32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536,
    1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 10240, 12288, 16384, 24576, 32768,
)  # fmt: skip
TILE_PROBES = (257, 513)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXTS = (256, 1024, 4096)
MIXED_PROMPTS = (256, 1024, 4096)
MIXED_BATCHES = (8, 64, 256)
REFINE_FACTORS = (0.7, 0.85, 1.15, 1.3)  # extra prefill sizes around a first-pass knee
TIGHT_REPEATS = 3  # a probe whose first repeats agree stops after this many
TIGHT_SPREAD = 0.02  # ... when they lie within 2% of their median


def tight(times_s: Sequence[float]) -> bool:
    """Enough repeats of one probe: at least TIGHT_REPEATS, all within TIGHT_SPREAD of their
    median (on a noisy CPU they rarely are, and every repeat is taken)."""
    if len(times_s) < TIGHT_REPEATS:
        return False
    middle = float(np.median(times_s))
    return middle > 0 and (max(times_s) - min(times_s)) <= TIGHT_SPREAD * middle


@dataclass(slots=True, frozen=True)
class ProbeSpec:
    """One iteration shape to time: a prompt of prompt_tokens at offset 0 beside ``batch``
    decodes at context_tokens each."""

    series: str
    prompt_tokens: int
    batch: int = 0
    context_tokens: int = 0
    tag: str = ""


@dataclass(slots=True, frozen=True)
class ProfilePlan:
    """The probes in measuring order (prefill, decode, mixed) and the repeats of each."""

    probes: tuple[ProbeSpec, ...]
    repeats: int
    refine_knee: bool = True

    def series(self, name: str) -> list[ProbeSpec]:
        return [p for p in self.probes if p.series == name]


def make_plan(
    *,
    max_tokens: int,
    max_batch: int,
    contexts: Sequence[int] = DEFAULT_CONTEXTS,
    repeats: int = 5,
    mixed_context: int = 1024,
    kv_token_budget: int | None = None,
) -> ProfilePlan:
    """The standard grid up to ``max_tokens`` prompt tokens and ``max_batch`` decodes.

    kv_token_budget caps batch x context (the KV tokens a probe needs resident); larger decode
    and mixed probes are left out.
    """
    prefill = sorted({p for p in PREFILL_GRID if p <= max_tokens} | {max_tokens})
    probes = []
    for size in prefill:
        probes.append(ProbeSpec("prefill", size))
        # A tile probe right after its round neighbour: the two see the same machine (a drift
        # in load between them would read as a tile effect).
        if size + 1 in TILE_PROBES and size + 1 <= max_tokens:
            probes.append(ProbeSpec("prefill", size + 1, tag="tile"))
    batches = sorted({b for b in DECODE_BATCHES if b <= max_batch} | {max_batch})
    usable_contexts = sorted({min(c, max_tokens) for c in contexts})

    def fits(batch: int, context: int) -> bool:
        return kv_token_budget is None or batch * context <= kv_token_budget

    probes += [ProbeSpec("decode", 0, b, c) for c in usable_contexts for b in batches if fits(b, c)]
    mixed_context = min(mixed_context, max_tokens)
    mixed_prompts = sorted({min(p, max_tokens) for p in MIXED_PROMPTS})
    mixed_batches = sorted({min(b, max_batch) for b in MIXED_BATCHES})
    probes += [
        ProbeSpec("mixed", p, b, mixed_context)
        for p in mixed_prompts
        for b in mixed_batches
        if fits(b, mixed_context)
    ]
    return ProfilePlan(tuple(probes), repeats)


def refine_sizes(knee_tokens: float, measured: Sequence[int], max_tokens: int) -> list[int]:
    """Extra prefill sizes (multiples of 16) around a first-pass knee not measured yet."""
    out = set()
    for factor in REFINE_FACTORS:
        size = round(knee_tokens * factor / 16.0) * 16
        if 16 <= size <= max_tokens and size not in measured:
            out.add(size)
    return sorted(out)


class IterationTimer(Protocol):
    """A measurement path: times iteration shapes on one engine.

    request_overhead_series: series whose times carry a fixed extra (e.g. prefill measured as
    TTFT through HTTP); the step-time fit gives them an offset of their own.
    """

    engine: EngineInfo
    hardware: Hardware
    request_overhead_series: tuple[str, ...]

    def warm_up(self, spec: ProbeSpec) -> None: ...

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        """The measured probe: ``spec``'s shape (a path may report the context it actually
        reached, e.g. decodes whose context grew while measured) and its timings, seconds."""
        ...


ProgressFn = Callable[[str, int, int], None]  # (series, probes done, probes planned)


@dataclass(slots=True, frozen=True)
class Skipped:
    """A probe left out because it no longer fit the time budget, and what it would have cost."""

    spec: ProbeSpec
    cost_s: float

    def describe(self) -> str:
        return f"{describe(self.spec)}, ~{self.cost_s:.0f} s"


@dataclass(slots=True)
class ProbeRun:
    """What the probe loop produced; ``error`` is set when it stopped early; ``skipped``: the
    probes a time budget left out."""

    probes: list[Probe] = field(default_factory=list)
    error: str | None = None
    elapsed_s: float = 0.0
    skipped: list[Skipped] = field(default_factory=list)


class ProbeTimeout(EngineError):
    """One probe took longer than --probe-timeout."""


def run_probes(
    plan: ProfilePlan,
    timer: IterationTimer,
    *,
    progress: ProgressFn | None = None,
    probe_timeout_s: float | None = None,
    knee_finder: Callable[[list[Probe]], float | None] | None = None,
    max_tokens: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
    time_budget_s: float | None = None,
    probe_cost: Callable[[ProbeSpec, list[Probe]], float] | None = None,
) -> ProbeRun:
    """Warm up before each series, then time every probe of the plan in order: the prefill
    series in rounds (``_time_in_rounds``), each later probe's repeats together.

    knee_finder: called on the prefill probes after that series; sizes around the knee it
    returns are measured too (when ``plan.refine_knee``). A failing probe (EngineError, a
    timeout, an out-of-memory RuntimeError) ends the loop; what was measured is kept.

    time_budget_s with ``probe_cost`` (seconds a probe will take, estimated from those measured):
    the probes after the prefill series run cheapest first, the series taking turns, and one that
    would end past the budget is skipped (``run.skipped``), except the first of its series, which
    always runs.
    Each estimate is scaled up by the median ratio of taken to estimated time over the probes
    run so far, when above 1: the estimate is rough by design, and on the vLLM CPU build it read
    ~20% low, so an unscaled last probe could end the probing past the budget.
    """
    run = ProbeRun()
    started = clock()
    pending = list(plan.probes)
    planned = len(pending) + (len(REFINE_FACTORS) if plan.refine_knee and knee_finder else 0)
    done = 0
    series_seen: set[str] = set()
    refine = plan.refine_knee and knee_finder is not None
    budgeted = time_budget_s is not None and probe_cost is not None
    ordered = False  # the probes after the prefill series, put cheapest first once
    taken_per_estimate: list[float] = []  # each budgeted probe's time over its estimate

    def report(series: str, finished: int) -> None:
        if progress:
            progress(series, finished, planned)

    try:
        while pending:
            if budgeted and not ordered and pending[0].series != "prefill":
                assert probe_cost is not None
                ordered = True
                pending = _cheapest_first_by_turns(pending, run.probes, probe_cost)
            spec = pending[0]
            estimate_s = 0.0
            if budgeted and spec.series != "prefill":
                assert probe_cost is not None and time_budget_s is not None
                estimate_s = probe_cost(spec, run.probes)
                # up, never down: where the small probes' estimates read high and the large
                # ones' hold (the tests' simulated engine), scaling down lets the last overrun
                low_by = statistics.median(taken_per_estimate) if taken_per_estimate else 1.0
                cost_s = estimate_s * max(low_by, 1.0)
                if spec.series in series_seen and clock() - started + cost_s > time_budget_s:
                    pending.pop(0)
                    run.skipped.append(Skipped(spec, cost_s))
                    planned -= 1
                    report(spec.series, done)
                    continue
            if spec.series not in series_seen:
                series_seen.add(spec.series)
                report(spec.series, done)
                timer.warm_up(spec)
            if spec.series == "prefill":
                block = []
                while pending and pending[0].series == "prefill":
                    block.append(pending.pop(0))

                def on_pass(passes: int, base: int = done) -> None:
                    report("prefill", base + passes // plan.repeats)

                done += len(block)
                _time_in_rounds(block, plan.repeats, timer, run, clock, probe_timeout_s, on_pass)
            else:
                pending.pop(0)
                probe_started = clock()
                run.probes.append(timer.time_probe(spec, plan.repeats))
                done += 1
                took_s = clock() - probe_started
                if estimate_s > 0:
                    taken_per_estimate.append(took_s / estimate_s)
                _check_timeout(spec, took_s, probe_timeout_s)
            if spec.series == "prefill" and refine:
                refine = False  # once: the sizes it adds are prefill probes too
                assert knee_finder is not None
                knee = knee_finder(run.probes)
                extra: list[int] = []
                if knee is not None:
                    measured = [p.prompt_tokens for p in run.probes]
                    extra = refine_sizes(knee, measured, max_tokens or max(measured))
                pending[0:0] = [ProbeSpec("prefill", p, tag="refine") for p in extra]
                planned += len(extra) - len(REFINE_FACTORS)
            report(spec.series, done)
    except (BudgettuneError, RuntimeError, MemoryError) as exc:
        run.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    run.elapsed_s = clock() - started
    return run


def _cheapest_first_by_turns(
    pending: list[ProbeSpec],
    measured: list[Probe],
    probe_cost: Callable[[ProbeSpec, list[Probe]], float],
) -> list[ProbeSpec]:
    """The probes after the prefill series, each series cheapest first, the series taking turns
    (the cheapest series first). Sorted as one list, a tight budget spent itself on the cheap
    decode probes: on a slow day of the vLLM CPU build the mixed series kept one probe of 9 and
    the fit had no held-out error for it."""
    costs = {id(p): probe_cost(p, measured) for p in pending}
    queues: dict[str, list[ProbeSpec]] = {}
    for spec in sorted(pending, key=lambda p: costs[id(p)]):
        queues.setdefault(spec.series, []).append(spec)
    turns = itertools.zip_longest(*queues.values())
    return [spec for turn in turns for spec in turn if spec is not None]


def _check_timeout(spec: ProbeSpec, took_s: float, probe_timeout_s: float | None) -> None:
    if probe_timeout_s is not None and took_s > probe_timeout_s:
        raise ProbeTimeout(
            f"probe {describe(spec)} took {took_s:.3g} s, over --probe-timeout "
            f"{probe_timeout_s:g} s"
        )


def _time_in_rounds(
    block: list[ProbeSpec],
    repeats: int,
    timer: IterationTimer,
    run: ProbeRun,
    clock: Callable[[], float],
    probe_timeout_s: float | None,
    passes_done: Callable[[int], None],
) -> None:
    """Time a series' probes one pass each, smallest first, ``repeats`` rounds over them, and
    add them to ``run`` (also when a pass fails: what was measured is kept).

    Why rounds: a probe's repeats taken back to back share whatever the machine was doing then.
    This machine's speed moves by x1.3-1.6 in turns of seconds to a minute (see
    benchmarks/bench_machine_speed.py); with back-to-back repeats a slow turn lifts a run of
    neighbouring sizes together, and the knee finder reads the step as a bend. In rounds each
    size's repeats are a round apart, a slow turn lifts one repeat of each size it covers, and
    the median sets it aside. A probe whose repeats are tight (TIGHT_SPREAD) leaves the rounds.
    """
    measured: dict[int, Probe] = {}  # each probe's passes so far, merged (block order)
    passes_of = dict.fromkeys(range(len(block)), 0)
    took_s = dict.fromkeys(range(len(block)), 0.0)
    try:
        for _ in range(repeats):
            for i, spec in enumerate(block):
                so_far = measured.get(i)
                if so_far is not None and tight(so_far.times_s):
                    continue
                began = clock()
                probe = timer.time_probe(spec, 1)
                took_s[i] += clock() - began
                passes_of[i] += 1
                measured[i] = (
                    probe
                    if so_far is None
                    else replace(so_far, times_s=so_far.times_s + probe.times_s)
                )
                passes_done(sum(passes_of.values()))
                # The limit is on a probe's repeats together; after its first pass, what all of
                # them will take stops it then, not a round later.
                taken = passes_of[i]
                all_s = took_s[i] / taken * repeats
                if probe_timeout_s is not None and all_s > probe_timeout_s:
                    if taken == repeats:
                        _check_timeout(spec, took_s[i], probe_timeout_s)
                    raise ProbeTimeout(
                        f"probe {describe(spec)} took {took_s[i]:.3g} s for {taken} of its "
                        f"{repeats} repeats (~{all_s:.3g} s for all), over "
                        f"--probe-timeout {probe_timeout_s:g} s"
                    )
    finally:
        run.probes.extend(measured[i] for i in sorted(measured))


def describe(spec: ProbeSpec) -> str:
    """Short human description of a probe shape."""
    parts = []
    if spec.prompt_tokens:
        parts.append(f"prompt {spec.prompt_tokens}")
    if spec.batch:
        parts.append(f"{spec.batch} decodes at context {spec.context_tokens}")
    return f"{spec.series} ({', '.join(parts)})"
