"""The sweep's live verifications in rounds: each round verifies up to one budget per slot (the
interval search's picks, :func:`budgettune.tune.strategy.next_indices`; with one slot exactly the
sequential search), through an executor, appending each point to points.jsonl as it arrives.

The engine default ("what you run today") fills a slot the search leaves free, else gets a round
of its own at the end. A point whose worker was lost (Ray) is re-queued once.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from budgettune.app.executors import Executor, RoundEvents
from budgettune.app.slot_job import SlotJob
from budgettune.app.slots import Slot
from budgettune.app.traffic import Traffic
from budgettune.artifacts.runfolder import append_point
from budgettune.core.errors import UserError
from budgettune.tune.candidates import Candidates
from budgettune.tune.point import Point, Predicted, Role, Status
from budgettune.tune.predict import Prediction
from budgettune.tune.strategy import SearchState, Verdict, clear_fallback, next_indices
from budgettune.tune.sweep_config import SweepConfig

REQUEUE_LOST = 1  # times a point whose worker was lost is queued again


@dataclass(slots=True)
class RoundsOutcome:
    """How the verification went: engine launches made and rounds run by this invocation."""

    launches: int = 0
    rounds: int = 0


def served_model(point: Point) -> str | None:
    """The model the engine said it served for a measured point (None: not measured)."""
    if not point.is_measured or point.engine is None:
        return None
    model = point.engine.get("model")
    return str(model) if model else None


def check_same_model(point: Point, earlier: Iterable[Point], run_dir: Path) -> None:
    """Refuse (UserError, before the point is saved) a point served by another model than the
    points already in the run folder: one answer cannot rest on two models, and a resumed sweep
    against a server restarted with another model would otherwise merge them without a word."""
    model = served_model(point)
    if model is None:
        return
    for other in earlier:
        theirs = served_model(other)
        if theirs is not None and theirs != model:
            raise UserError(
                f"budget {point.budget} was served by model {model!r}, but budget "
                f"{other.budget} in {run_dir} was measured on {theirs!r}; its point was not "
                "saved",
                hint=f"serve {theirs!r} again and --resume {run_dir}, or start a new sweep with -o",
            )


async def verify_in_rounds(
    config: SweepConfig,
    traffic: Traffic,
    candidates: Candidates,
    predictions: Mapping[int, Prediction],
    done: dict[int, Point],
    *,
    executor: Executor,
    slots: Sequence[Slot],
    events: RoundEvents,
    on_point: Callable[[Point], None] | None = None,
    on_round: Callable[[int, Sequence[tuple[int, Role]]], None] | None = None,
) -> RoundsOutcome:
    """Verify what the search needs, round by round, into ``done`` (budget -> point; resumed
    points are already there and are not run again)."""
    outcome = RoundsOutcome()
    verdicts = {
        b: Verdict(*_ok(config, p)) for b, p in predictions.items()
    }  # the predictions' verdicts
    schedules = (traffic.schedule, *(traffic.reseeded(k) for k in range(1, config.max_replays)))
    k = len(slots)
    requeued: dict[int, int] = {}

    async def run_round(pairs: list[tuple[int, Role]]) -> None:
        outcome.rounds += 1
        outcome.launches += len(pairs)
        if on_round is not None:
            on_round(outcome.rounds, pairs)
        ports = distinct_free_ports(len(pairs)) if k > 1 else [config.base_spec.port]
        jobs = [
            SlotJob(
                config=config,
                budget=budget,
                role=role,
                predicted=Predicted.of(predictions[budget]) if budget in predictions else None,
                schedules=schedules,
                slot=slots[i],
                port=ports[i],
                round=outcome.rounds,
                early_stop=not config.exhaustive,
            )
            for i, (budget, role) in enumerate(pairs)
        ]

        def finished(point: Point) -> None:
            check_same_model(point, done.values(), config.run_dir)
            append_point(config.run_dir, point)
            done[point.budget] = point
            if on_point is not None:
                on_point(point)

        await executor.run_round(jobs, finished, events)
        lost = [(b, r) for b, r in pairs if done[b].status is Status.LOST]
        again = [(b, r) for b, r in lost if requeued.get(b, 0) < REQUEUE_LOST]
        for budget, _ in again:
            requeued[budget] = requeued.get(budget, 0) + 1
            if events.on_message is not None:
                events.on_message(f"  budget {budget}: {done[budget].error}; queued again")
        if again:
            await run_round(again)

    reference = config.default_budget
    first = executor.first_budget  # its engine already runs: verified before any other
    if first is not None and first not in done:
        await run_round(
            [(first, Role.CANDIDATE if first in candidates.budgets else Role.REFERENCE)]
        )
    if config.exhaustive:
        todo = [b for b in candidates.budgets if b not in done]
        for start in range(0, len(todo), k):
            await run_round([(b, Role.CANDIDATE) for b in todo[start : start + k]])
    while not config.exhaustive:
        picked = search_round(candidates.budgets, done, verdicts, k, reference)
        if not picked:
            break
        await run_round(picked)
    if reference is not None and reference not in done:
        await run_round([(reference, Role.REFERENCE)])
    return outcome


def search_round(
    budgets: Sequence[int],
    done: Mapping[int, Point],
    verdicts: Mapping[int, Verdict],
    k: int,
    reference: int | None,
) -> list[tuple[int, Role]]:
    """The budgets the interval search verifies next, up to ``k`` (one per slot), from the
    verdicts of the points in ``done`` and the predictions' ``verdicts`` elsewhere; the engine
    default (``reference``) fills a slot the search leaves free. Empty when the search is done.
    A budget whose engine failed is left out of the search."""
    usable = [b for b in budgets if b not in done or done[b].is_measured]
    state = SearchState(n=len(usable))
    for position, budget in enumerate(usable):
        if budget in done:
            point = done[budget]
            state.record(position, Verdict(bool(point.tbt_ok), bool(point.ttft_ok)))
    picks = next_indices(state, [verdicts[b] for b in usable], k)
    if not picks:
        # The answer is a marginal pass: verify below it until a budget passes clearly,
        # so the verdict can name one.
        clear = {i for i, b in enumerate(usable) if b in done and done[b].clear_pass}
        fallback = clear_fallback(state, clear)
        picks = [] if fallback is None else [fallback]
    if not picks:
        return []
    pairs = [(usable[i], Role.CANDIDATE) for i in picks]
    spare = len(pairs) < k and reference is not None and reference not in done
    if spare and reference not in {b for b, _ in pairs}:
        assert reference is not None
        pairs.append((reference, Role.REFERENCE))  # a free slot: today's budget
    return pairs


def _ok(config: SweepConfig, prediction: Prediction) -> tuple[bool, bool]:
    judgement = config.slo.judge_at(prediction.tbt_s, prediction.ttft_s)
    return judgement.tbt_ok, judgement.ttft_ok


def distinct_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports free on ``host`` now, all different: every socket is held open until all
    are bound, so no two slots of a round can be given one port."""
    with ExitStack() as stack:
        sockets = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
