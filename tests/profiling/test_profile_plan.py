"""The probe grid and the probe loop: progress counts, one knee refinement, partial runs kept,
the probe timeout measured on an injected clock. The timer here is a real iteration-time source,
the roofline model itself (what the sim engine serves), not a mock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from budgettune.core.errors import EngineError
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.profile import EngineInfo, Hardware, Probe
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.budget import probe_cost_s
from budgettune.profiling.plan import (
    PREFILL_GRID,
    ProbeSpec,
    ProfilePlan,
    make_plan,
    refine_sizes,
    run_probes,
)

# The seed calibration: the timeout test below works in its figures.
MODEL = StepModel.from_hardware(
    resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), calibration="seed"
)


class ModelTimer:
    """Times probes with the step-time model; fails at ``fail_at`` (a probe index) if set."""

    engine = EngineInfo("model")
    hardware = Hardware("preset", "h100-sxm", preset="h100-sxm")
    request_overhead_series: tuple[str, ...] = ()

    def __init__(self, fail_at: int | None = None, slowdown: float = 1.0) -> None:
        self.fail_at = fail_at
        self.slowdown = slowdown
        self.now_s = 0.0  # a virtual clock: timing a probe advances it by the probe's time
        self.timed: list[ProbeSpec] = []
        self.warmed: list[str] = []

    def warm_up(self, spec: ProbeSpec) -> None:
        self.warmed.append(spec.series)

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        if self.fail_at is not None and len(self.timed) == self.fail_at:
            raise EngineError("the engine exited (status -9)")
        self.timed.append(spec)
        chunks = [(spec.prompt_tokens, 0)] if spec.prompt_tokens else []
        seconds = MODEL.iteration_time_s(chunks, [spec.context_tokens] * spec.batch)
        self.now_s += seconds * repeats * self.slowdown
        return Probe(
            spec.series, spec.prompt_tokens, spec.batch, spec.context_tokens,
            (seconds,) * repeats, spec.tag,
        )  # fmt: skip


def test_grid_respects_the_limits() -> None:
    plan = make_plan(max_tokens=3000, max_batch=48, contexts=(256, 1024, 4096), repeats=2)
    prefill = [p.prompt_tokens for p in plan.series("prefill") if p.tag == ""]
    assert prefill == sorted({p for p in PREFILL_GRID if p <= 3000} | {3000})
    assert [p.prompt_tokens for p in plan.series("prefill") if p.tag == "tile"] == [257, 513]
    # Each tile probe is measured right after its round neighbour, under the same load.
    order = [(p.prompt_tokens, p.tag) for p in plan.series("prefill")]
    for tile in (257, 513):
        at = order.index((tile, "tile"))
        assert order[at - 1] == (tile - 1, "")
    assert (257, "tile") not in [
        (p.prompt_tokens, p.tag) for p in make_plan(max_tokens=256, max_batch=4).probes
    ]
    decode = plan.series("decode")
    assert {p.batch for p in decode} == {1, 2, 4, 8, 16, 32, 48}
    assert {p.context_tokens for p in decode} == {256, 1024, 3000}  # 4096 capped at max tokens
    assert {(p.prompt_tokens, p.batch) for p in plan.series("mixed")} == {
        (256, 8), (256, 48), (1024, 8), (1024, 48), (3000, 8), (3000, 48),
    }  # fmt: skip
    small = make_plan(max_tokens=3000, max_batch=48, repeats=2, kv_token_budget=20_000)
    assert all(p.batch * p.context_tokens <= 20_000 for p in small.probes if p.batch)
    # The order the loop measures in: every prefill, then decode, then mixed.
    series = [p.series for p in plan.probes]
    assert series == sorted(series, key=["prefill", "decode", "mixed"].index)


def test_refine_sizes_around_a_knee() -> None:
    # 200 x (0.7, 0.85, 1.15, 1.3) = 140, 170, 230, 260 -> multiples of 16: 144, 176, 224, 256
    assert refine_sizes(200.0, [128, 160, 192, 224, 256], 8192) == [144, 176]
    assert refine_sizes(200.0, [144, 176], 8192) == [224, 256]
    assert refine_sizes(8000.0, [], 8192) == [5600, 6800]  # none beyond --max-tokens


def test_loop_counts_warms_up_and_refines_once() -> None:
    plan = make_plan(max_tokens=2048, max_batch=16, contexts=(128, 512), repeats=3)
    timer = ModelTimer()
    seen: list[tuple[str, int, int]] = []
    run = run_probes(
        ProfilePlan(plan.probes, 3),
        timer,
        progress=lambda s, done, planned: seen.append((s, done, planned)),
        knee_finder=lambda probes: 300.0,
        max_tokens=2048,
    )
    assert run.error is None
    refined = [p.prompt_tokens for p in run.probes if p.tag == "refine"]
    assert refined == refine_sizes(300.0, [p.prompt_tokens for p in plan.probes], 2048)
    assert len(run.probes) == len(plan.probes) + len(refined)
    assert timer.warmed == ["prefill", "decode", "mixed"]  # once before each series
    dones = [done for _, done, _ in seen]
    assert dones == sorted(dones) and seen[-1][1] == seen[-1][2] == len(run.probes)
    assert all(done <= planned for _, done, planned in seen[-len(plan.series("mixed")) :])
    assert all(len(p.times_s) == 3 for p in run.probes)


def test_a_failing_probe_keeps_what_was_measured() -> None:
    plan = make_plan(max_tokens=1024, max_batch=8, repeats=1)
    run = run_probes(plan, ModelTimer(fail_at=5))
    assert run.error == "the engine exited (status -9)"
    assert [p.prompt_tokens for p in run.probes] == [32, 48, 64, 96, 128]


def test_probe_timeout_on_an_injected_clock() -> None:
    """On a virtual clock where each probe takes 1000x its modeled time, a prefill of 2048
    tokens (~56 s) passes a 60 s limit and the next size, 2560 (~73 s), stops the loop, is kept
    and is named."""
    plan = make_plan(max_tokens=4096, max_batch=8, repeats=1)
    timer = ModelTimer(slowdown=1000.0)
    run = run_probes(plan, timer, probe_timeout_s=60.0, clock=lambda: timer.now_s)
    assert run.error == "probe prefill (prompt 2560) took 72.7 s, over --probe-timeout 60 s"
    assert [p.prompt_tokens for p in run.probes][-2:] == [2048, 2560]
    assert run.elapsed_s == timer.now_s


class TurningTimer(ModelTimer):
    """The machine turns x1.5 slower for ``slow_passes`` consecutive timed passes from pass
    ``slow_from`` on: a slow turn of a few seconds, as bench_machine_speed.py saw here."""

    def __init__(self, slow_from: int, slow_passes: int) -> None:
        super().__init__()
        self.slow = range(slow_from, slow_from + slow_passes)

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        factor = 1.5 if len(self.timed) in self.slow else 1.0
        clean = super().time_probe(spec, repeats)
        return Probe(
            clean.series, clean.prompt_tokens, clean.batch, clean.context_tokens,
            tuple(t * factor for t in clean.times_s), clean.tag,
        )  # fmt: skip


def test_a_slow_turn_of_the_machine_does_not_bend_the_prefill_curve() -> None:
    """A slow turn as long as eight sizes' passes: measured in rounds it lifts one repeat of each
    of those sizes and every median is the clean time. Back to back (the old loop), it lifted all
    three repeats of three sizes together: a step the knee finder could call a bend."""
    plan = make_plan(max_tokens=2048, max_batch=8, repeats=3)
    sizes = len(plan.series("prefill"))
    clean = run_probes(plan, ModelTimer())
    turned = run_probes(plan, TurningTimer(slow_from=sizes + 6, slow_passes=8))
    assert turned.error is None
    clean_ms = {(p.prompt_tokens, p.tag): p.median_s for p in clean.probes if p.series == "prefill"}
    turned_prefill = [p for p in turned.probes if p.series == "prefill"]
    assert len(turned_prefill) == sizes
    assert {(p.prompt_tokens, p.tag): p.median_s for p in turned_prefill} == clean_ms
    lifted = [p for p in turned_prefill if max(p.times_s) > min(p.times_s)]
    assert len(lifted) == 8  # one repeat each of the eight sizes the turn covered
    assert [p.prompt_tokens for p in turned_prefill] == [
        p.prompt_tokens for p in plan.series("prefill")
    ]


def test_probe_timeout_over_repeats_stops_at_the_first_pass() -> None:
    """In rounds, a probe whose first pass shows its repeats will pass the limit stops the loop
    then (the sizes after it in that round are not measured); what was measured is kept."""
    plan = make_plan(max_tokens=4096, max_batch=8, repeats=3)
    timer = ModelTimer(slowdown=1000.0)
    run = run_probes(plan, timer, probe_timeout_s=200.0, clock=lambda: timer.now_s)
    assert run.error == (
        "probe prefill (prompt 2560) took 72.7 s for 1 of its 3 repeats (~218 s for all), "
        "over --probe-timeout 200 s"
    )
    kept = [p for p in run.probes if p.series == "prefill"]
    assert kept[-1].prompt_tokens == 2560 and len(kept[-1].times_s) == 1
    assert all(len(p.times_s) == 1 for p in kept)  # the loop stopped in the first round


class SetUpTimer(ModelTimer):
    """A CPU build's costs on the virtual clock: prompts go at 4,000 tokens/s, so a prefill
    probe of P tokens takes P / 4000 s each repeat, and a decode or mixed probe first pays for
    prefilling its decoders' prompts (batch x context tokens), as the engine path does."""

    RATE = 4000.0

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        if spec.series == "prefill":
            self.timed.append(spec)
            seconds = 0.005 + spec.prompt_tokens / self.RATE
            self.now_s += seconds * repeats
            return Probe("prefill", spec.prompt_tokens, 0, 0, (seconds,) * repeats, spec.tag)
        self.now_s += spec.batch * spec.context_tokens / self.RATE
        return super().time_probe(spec, repeats)


def prefill_estimate(plan: ProfilePlan) -> Callable[[ProbeSpec, list[Probe]], float]:
    """The profile's own cost estimate (app/profile.py), made from the prefill probes measured."""

    def cost(spec: ProbeSpec, measured: list[Probe]) -> float:
        return probe_cost_s(spec, [p for p in measured if p.series == "prefill"], plan.repeats)

    return cost


def test_a_time_budget_runs_cheap_probes_first_and_skips_the_rest() -> None:
    plan = make_plan(max_tokens=2048, max_batch=128, repeats=3)
    cost = prefill_estimate(plan)

    full_timer = SetUpTimer()
    full = run_probes(plan, full_timer, clock=lambda: full_timer.now_s)
    assert not full.skipped and full_timer.now_s > 200  # 128 decoders at 2048: a minute alone
    timer = SetUpTimer()
    budgeted = run_probes(
        plan, timer, clock=lambda: timer.now_s, time_budget_s=60.0, probe_cost=cost
    )
    assert budgeted.skipped and budgeted.error is None
    timed = [p for p in timer.timed if p.series != "prefill"]
    full_later = [p for p in full_timer.timed if p.series != "prefill"]
    assert len(timed) + len(budgeted.skipped) == len(full_later)
    # every prefill probe ran; each later series kept its cheapest probes and lost its largest
    # (in rounds: every prefill probe once per round, smallest first)
    assert [p for p in timer.timed if p.series == "prefill"] == plan.series("prefill") * 3
    assert {"decode", "mixed"} <= {p.series for p in timed}
    costs = [cost(p, budgeted.probes) for p in timed]
    for series in ("decode", "mixed"):  # each series cheapest first, the two taking turns
        ran = [c for p, c in zip(timed, costs, strict=True) if p.series == series]
        left = [item.cost_s for item in budgeted.skipped if item.spec.series == series]
        assert len(ran) >= 3 and left, (series, ran, left)
        assert max(ran) <= min(left) * 1.5  # (a probe's own cost is estimated when it is due)
    assert all(item.spec.batch * item.spec.context_tokens > 0 for item in budgeted.skipped)
    biggest = max(plan.series("decode"), key=lambda p: p.batch * p.context_tokens)
    assert biggest in [item.spec for item in budgeted.skipped]
    # the budget holds, give or take the one probe that ran when its estimate said it fit
    assert timer.now_s <= 60.0 + max(costs)
    said = budgeted.skipped[0].describe()
    assert said.startswith(("decode (", "mixed (")) and said.endswith(" s")


class LowEstimateTimer(SetUpTimer):
    """As SetUpTimer for the prefill series; every later probe then takes ``low`` times what
    ``probe_cost_s`` estimates for it from that series (on the vLLM CPU build the estimates read
    ~20% low)."""

    def __init__(self, repeats: int, low: float) -> None:
        super().__init__()
        self.repeats = repeats
        self.low = low
        self.prefill: list[Probe] = []

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        if spec.series == "prefill":
            self.prefill.append(super().time_probe(spec, repeats))
            return self.prefill[-1]
        self.timed.append(spec)
        self.now_s += self.low * probe_cost_s(spec, self.prefill, self.repeats)
        return Probe(
            spec.series, spec.prompt_tokens, spec.batch, spec.context_tokens,
            (0.01,) * repeats, spec.tag,
        )  # fmt: skip


@pytest.mark.parametrize("low", [1.2, 1.3, 1.5])
@pytest.mark.parametrize("budget_s", [30.0, 40.0, 50.0, 60.0, 70.0, 80.0])
def test_a_time_budget_holds_when_the_estimates_read_low(low: float, budget_s: float) -> None:
    plan = make_plan(max_tokens=2048, max_batch=128, repeats=3)
    cost = prefill_estimate(plan)

    timer = LowEstimateTimer(plan.repeats, low)
    budgeted = run_probes(
        plan, timer, clock=lambda: timer.now_s, time_budget_s=budget_s, probe_cost=cost
    )
    assert budgeted.skipped and budgeted.error is None
    # the estimates are scaled by what the probes run so far took, so the budget holds (taken
    # unscaled, the probing overran 7 of these 18 budgets, by up to 7.2 s)
    assert timer.now_s <= budget_s, timer.now_s
    # the cost listed for a skipped probe is the scaled one
    first = budgeted.skipped[0]
    assert abs(first.cost_s - low * cost(first.spec, budgeted.probes)) < 1e-6, first


def test_a_tight_time_budget_keeps_probes_of_every_series() -> None:
    plan = make_plan(max_tokens=2048, max_batch=128, repeats=3)
    cost = prefill_estimate(plan)

    timer = SetUpTimer()
    budgeted = run_probes(
        plan, timer, clock=lambda: timer.now_s, time_budget_s=25.0, probe_cost=cost
    )
    kept = Counter(p.series for p in budgeted.probes)
    # the series take turns, so the mixed series is not crowded out by the cheaper decode
    # probes (sorted as one list it kept 1 probe here, and the fit no held-out error for it)
    assert kept["decode"] >= 3 and kept["mixed"] >= 3, kept
    assert timer.now_s <= 25.0
