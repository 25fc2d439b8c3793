"""`sweep --max-num-seqs A,B,C`: the budget and max-num-seqs tuned together.

The budget candidates come as for one knob (from the step-time model at the engine's own
max-num-seqs, or --budgets); the simulator predicts every pair; the two-knob search
(:mod:`budgettune.tune.pair_search`) picks which pairs are launched and replayed, each exactly
as a one-knob sweep verifies a budget (early stop, intervals, marginal re-measures). Each
max-num-seqs value keeps its measurements in a folder of its own in the run folder,
``seqs-S`` (points.jsonl and each budget's replays); the run folder's own outputs are the
chosen value's, with ``max_num_seqs`` beside ``budget`` and every pair in ``pairs``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path

from budgettune.app.executors import Executor, InProcess, RoundEvents
from budgettune.app.launch import refused_pairs
from budgettune.app.rounds import distinct_free_ports, verify_in_rounds
from budgettune.app.slots import Slot
from budgettune.app.sweep import (
    SweepEvents,
    SweepResult,
    goodput_points,
    plan,
    write_run_folder,
)
from budgettune.app.traffic import Traffic
from budgettune.artifacts.recommendation import RunFacts, recommendation_document
from budgettune.artifacts.runfolder import load_points
from budgettune.tune.candidates import Candidates
from budgettune.tune.pair_grid import PAIRS_KEY, PairsOutcome, seqs_candidates
from budgettune.tune.pair_search import Pair, PairState, next_pairs
from budgettune.tune.point import Point, Status
from budgettune.tune.predict import Prediction, predict
from budgettune.tune.select import Recommendation, breaks_text, recommend
from budgettune.tune.strategy import Verdict
from budgettune.tune.sweep_config import SweepConfig


def seqs_config(config: SweepConfig, seqs: int) -> SweepConfig:
    """The one-knob sweep of budgets at max-num-seqs ``seqs``: its engines start with it, its
    predictions' scheduler holds it, its measurements go to the ``seqs-S`` folder."""
    return dataclasses.replace(
        config,
        base_spec=dataclasses.replace(config.base_spec, max_num_seqs=seqs),
        scheduler=dataclasses.replace(config.scheduler, max_num_seqs=seqs),
        run_dir=config.run_dir / f"seqs-{seqs}",
        max_num_seqs_values=(),
        max_num_seqs_auto=False,
        default_budget=None,
    )


def run_pair_sweep_to_end(
    config: SweepConfig,
    traffic: Traffic,
    events: SweepEvents | None = None,
    *,
    executor: Executor | None = None,
    slots: Sequence[Slot] = (Slot(0),),
) -> SweepResult:
    """:func:`run_pair_sweep` on an event loop of its own, to its end (as
    :func:`budgettune.app.sweep.run_sweep_to_end` for one knob)."""
    return asyncio.run(run_pair_sweep(config, traffic, events, executor=executor, slots=slots))


async def run_pair_sweep(
    config: SweepConfig,
    traffic: Traffic,
    events: SweepEvents | None = None,
    *,
    executor: Executor | None = None,
    slots: Sequence[Slot] = (Slot(0),),
) -> SweepResult:
    """Plan, search the pairs live (or every pair with ``config.exhaustive``), recommend, and
    write the run folder (made by the caller, as for one knob). With several ``slots``
    (--parallel, --ray), each round verifies as many pairs side by side (:func:`next_pairs`)."""
    events = events or SweepEvents()
    executor = executor or InProcess()
    started = time.perf_counter()
    candidates, base_predictions, _ = plan(config, traffic.schedule)
    outcome = _predicted_grid(config, traffic, candidates)
    _resumed(outcome, config.run_dir)
    if events.on_plan:
        events.on_plan(candidates, base_predictions)
    _say(events, _values_said(config, candidates, outcome))
    predicted = {
        (i, j): Verdict(*_judged(config, outcome.predictions[(budget, seqs)]))
        for i, budget in enumerate(outcome.budgets)
        for j, seqs in enumerate(outcome.seqs_values)
    }
    round_events = RoundEvents(
        on_slot=events.on_slot, on_message=events.on_message, on_replay=events.on_replay,
        on_start=events.on_start, on_ready=events.on_ready, on_launch=events.on_launch,
    )  # fmt: skip

    async def verify(pair: Pair, slot: Slot, port: int | None) -> Verdict | None:
        budget, seqs = outcome.budgets[pair[0]], outcome.seqs_values[pair[1]]
        _say(events, f"max-num-seqs {seqs}, budget {budget}")
        one = dataclasses.replace(seqs_config(config, seqs), budgets=(budget,), exhaustive=True)
        one = dataclasses.replace(one, base_spec=dataclasses.replace(one.base_spec, port=port))
        one.run_dir.mkdir(exist_ok=True)
        rounds = await verify_in_rounds(
            one, traffic, dataclasses.replace(candidates, budgets=(budget,)),
            {budget: outcome.predictions[(budget, seqs)]}, outcome.measured[seqs],
            executor=executor, slots=(slot,), events=round_events, on_point=events.on_point,
        )  # fmt: skip
        outcome.launches += rounds.launches
        return _verdict(outcome.measured[seqs][budget])

    async def verify_round(pairs: Sequence[Pair]) -> None:
        """``pairs`` side by side, one slot each, on ports no two engines share."""
        ports = distinct_free_ports(len(pairs)) if len(slots) > 1 else [config.base_spec.port]
        tasks = [
            asyncio.ensure_future(verify(pair, slots[i], ports[i])) for i, pair in enumerate(pairs)
        ]
        try:
            verdicts = await asyncio.gather(*tasks)
        except BaseException:  # Ctrl-C, a full disk: stop the other slots before going
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for pair, verdict in zip(pairs, verdicts, strict=True):
            outcome.state.record(pair, verdict)

    state, k, rounds = outcome.state, len(slots), 0
    if config.exhaustive:
        every = [pair for pair in state.pairs() if pair not in state.refused]
        for start in range(0, len(every), k):
            rounds += 1
            await verify_round(every[start : start + k])
    else:
        while picked := next_pairs(state, predicted, k):
            rounds += 1
            await verify_round(picked)
    if config.goodput:
        await _pairs_goodput(config, traffic, outcome, events)
    wall_s = time.perf_counter() - started
    facts = RunFacts(outcome.launches, rounds, k, executor.name, wall_s)
    return _finish(config, candidates, outcome, facts)


async def _pairs_goodput(
    config: SweepConfig, traffic: Traffic, outcome: PairsOutcome, events: SweepEvents
) -> None:
    """--goodput: each measured pair that meets both SLOs at the sweep's rate gets its highest
    sustainable rate (a launch each); the answer becomes the pair with the highest. A pair that
    breaks an SLO at that rate sustains less than it, so it cannot have the highest."""
    for seqs in outcome.seqs_values:
        feasible = [p for p in outcome.measured[seqs].values() if p.is_measured and p.ok]
        if not feasible:
            continue
        rated = await goodput_points(seqs_config(config, seqs), traffic.at_rate, feasible, events)
        outcome.measured[seqs].update({point.budget: point for point in rated})
        outcome.launches += len(rated)
    outcome.by_goodput = True


def _values_said(config: SweepConfig, candidates: Candidates, outcome: PairsOutcome) -> str:
    how = (
        f" (auto: from half to four times the expected decode batch, "
        f"{candidates.decode_batch:.0f}, and the engine's own limit, "
        f"{config.scheduler.max_num_seqs})"
        if config.max_num_seqs_auto
        else ""
    )
    values = ", ".join(map(str, outcome.seqs_values))
    return f"max-num-seqs: {values}{how}, tuned with the budget ({len(outcome.predictions)} pairs)"


def _verdict(point: Point) -> Verdict | None:
    """A measured point's verdict on each SLO (None: its engine failed, no verdict)."""
    return Verdict(bool(point.tbt_ok), bool(point.ttft_ok)) if point.is_measured else None


def _resumed(outcome: PairsOutcome, run_dir: Path) -> None:
    """The pairs an interrupted run already measured (--resume), from each value's folder, into
    the grid and the search's state: none is run again but those whose worker was lost."""
    for j, seqs in enumerate(outcome.seqs_values):
        for point in load_points(run_dir / f"seqs-{seqs}"):
            if point.status is Status.LOST or point.budget not in outcome.budgets:
                continue
            outcome.measured[seqs][point.budget] = point
            outcome.state.record((outcome.budgets.index(point.budget), j), _verdict(point))


def _predicted_grid(config: SweepConfig, traffic: Traffic, candidates: Candidates) -> PairsOutcome:
    """Every pair predicted by the simulator, at the replays' traffic (``auto``'s values from
    the plan's expected decode batch)."""
    values = config.max_num_seqs_values or seqs_candidates(
        candidates.decode_batch, config.scheduler.max_num_seqs
    )
    predictions = {}
    for seqs in values:
        scheduler = dataclasses.replace(config.scheduler, max_num_seqs=seqs)
        for budget in candidates.budgets:
            predictions[(budget, seqs)] = predict(
                traffic.schedule, config.step_model, scheduler, budget, q=config.quantile,
                warmup_requests=config.run.warmup_requests, concurrency=config.run.concurrency,
            )  # fmt: skip
    return PairsOutcome(
        budgets=candidates.budgets,
        seqs_values=values,
        predictions=predictions,
        measured={seqs: {} for seqs in values},
        state=PairState(
            len(candidates.budgets),
            len(values),
            refused=refused_pairs(config.engine, candidates.budgets, values),
        ),
    )


def _judged(config: SweepConfig, prediction: Prediction) -> tuple[bool, bool]:
    judgement = config.slo.judge_at(prediction.tbt_s, prediction.ttft_s)
    return judgement.tbt_ok, judgement.ttft_ok


def _finish(
    config: SweepConfig,
    candidates: Candidates,
    outcome: PairsOutcome,
    facts: RunFacts,
) -> SweepResult:
    """The verdict on the chosen max-num-seqs value's budgets (the smallest value when no pair
    meets both SLOs: there TBT is lowest), with the second knob's reasons, and the outputs."""
    chosen = outcome.chosen
    seqs = chosen[1] if chosen else outcome.seqs_values[0]
    at_seqs = dataclasses.replace(seqs_config(config, seqs), run_dir=config.run_dir)
    points = sorted(outcome.measured[seqs].values(), key=lambda point: point.budget)
    predictions = {b: p for (b, s), p in outcome.predictions.items() if s == seqs}
    one_knob = recommend(
        points, slo_tbt_s=config.slo_tbt_s, slo_ttft_s=config.slo_ttft_s,
        percentile=config.percentile, rate_per_s=config.rate_per_s, default_budget=None,
        candidates=candidates, asked_rate_per_s=config.asked_rate_per_s,
        requests=config.requests, concurrency=config.run.concurrency,
        expected_hit_share=config.expected_hit_share if config.base_spec.prefix_caching else None,
    )  # fmt: skip
    recommendation = (
        _by_goodput(one_knob, outcome)
        if outcome.by_goodput and chosen
        else _with_second_knob(one_knob, outcome, config.percentile)
    )
    document = recommendation_document(
        at_seqs, candidates, predictions, points, recommendation, facts
    )
    document["max_num_seqs"] = seqs if chosen else None
    document[PAIRS_KEY] = outcome.to_json()
    files = write_run_folder(at_seqs, recommendation, document, points)
    return SweepResult(
        candidates,
        predictions,
        points,
        recommendation,
        outcome.launches,
        facts.wall_s,
        files,
        document,
        pairs=outcome,
    )


def _by_goodput(one_knob: Recommendation, outcome: PairsOutcome) -> Recommendation:
    """--goodput: the pair with the highest goodput, and every other pair's, highest first."""
    rated = outcome.by_rate()
    (rate, budget, seqs), others = rated[0], rated[1:]
    return dataclasses.replace(
        one_knob,
        budget_tokens=budget,
        headline=f"Recommended: budget {budget} with max-num-seqs {seqs}: the highest goodput, "
        f"{rate:.3g} req/s within both SLOs.",
        reasons=(
            *(f"Budget {b} with max-num-seqs {s} sustains {r:.3g} req/s." for r, b, s in others),
            "Pairs that break an SLO at the sweep's rate sustain less than it: not searched.",
        ),
        binding_slo=None,
    )


def _with_second_knob(
    one_knob: Recommendation, outcome: PairsOutcome, percentile: float
) -> Recommendation:
    """The one-knob verdict at the chosen value, told as a pair: the headline names both
    knobs, and the reasons say why larger budgets and the other max-num-seqs values lost."""
    chosen = outcome.chosen
    if chosen is None:
        tried = ", ".join(map(str, outcome.seqs_values))
        return dataclasses.replace(
            one_knob,
            headline=f"No budget meets both SLOs at any max-num-seqs tried ({tried}).",
            reasons=(
                f"Shown: max-num-seqs {outcome.seqs_values[0]}, the smallest, where TBT is lowest.",
                *one_knob.reasons,
            ),
        )
    budget, seqs = chosen
    prefix = f"Recommended: {budget}."
    assert one_knob.headline.startswith(prefix), one_knob.headline
    headline = (
        f"Recommended: budget {budget} with max-num-seqs {seqs}." + one_knob.headline[len(prefix) :]
    )
    reasons = [*_seqs_reasons(outcome, budget, seqs, f"p{percentile:g}")]
    if budget < max(outcome.budgets):
        reasons.append(
            f"No budget above {budget} meets both SLOs at any max-num-seqs tried "
            f"({', '.join(map(str, outcome.seqs_values))})."
        )
    return dataclasses.replace(one_knob, headline=headline, reasons=(*reasons, *one_knob.reasons))


def _seqs_reasons(outcome: PairsOutcome, budget: int, seqs: int, p: str) -> list[str]:
    """Why the other max-num-seqs values lost at the chosen budget: the next larger one breaks
    an SLO (measured, or implied by a measured pair); the smaller ones leave less headroom."""
    reasons = []
    larger = [s for s in outcome.seqs_values if s > seqs]
    if larger:
        point = outcome.measured[larger[0]].get(budget)
        if point is not None and point.is_measured:
            reasons.append(f"At {budget}, max-num-seqs {larger[0]} {breaks_text(point, p)}.")
        else:
            reasons.append(
                f"At {budget}, max-num-seqs {larger[0]} is ruled out by a measured neighbour "
                "(more running sequences only raise TBT)."
            )
    smaller = [s for s in outcome.seqs_values if s < seqs]
    if smaller:
        reasons.append(
            f"Smaller max-num-seqs values ({', '.join(map(str, smaller))}) admit fewer requests "
            "at once: less headroom for bursts, longer queues for the first token."
        )
    return reasons


def _say(events: SweepEvents, text: str) -> None:
    if events.on_message:
        events.on_message(text)
