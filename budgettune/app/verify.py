"""One budget of a sweep verified live: start its engine, replay the traffic, and while the
verdict is marginal (inside its 95% intervals) or the load generator was unhealthy, replay it again
on the same engine with fresh arrivals, up to ``max_replays`` in all. The point pools the replays
(:func:`budgettune.tune.confidence.judge_replays`).

Only the first replay may stop early: an early stop fires when the verdict is clear, so a budget
replayed again was not stopped, and each re-measure runs its whole schedule.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from budgettune.app.launch import budget_spec
from budgettune.app.replay import ReplayConfig, ReplayResult, launched, replay_on, save_replay
from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.errors import EngineError, StorageError
from budgettune.core.metrics import MetricsSummary, summarize
from budgettune.loadgen.stop import StopReason
from budgettune.trace.schedule import Schedule
from budgettune.tune.confidence import BudgetVerdict, ReplayMeasure, interval_ms, judge_replays
from budgettune.tune.early_stop import EarlyStop, measured_records
from budgettune.tune.point import Point, Predicted, Role, Status, SummaryMs
from budgettune.tune.select import marginal_text
from budgettune.tune.sweep_config import SweepConfig

if TYPE_CHECKING:
    from budgettune.app.profile import HeldEngine
    from budgettune.engines.base import EngineHandle


class NotSaved(Exception):
    """A budget measured whose replay's results.json a full disk kept out: ``point`` is still to
    be appended to points.jsonl, then ``error`` stops the sweep (exit 1, --resume goes on)."""

    def __init__(self, point: Point, error: StorageError) -> None:
        super().__init__(str(error))
        self.point = point
        self.error = error


@dataclass(slots=True, frozen=True)
class Replayed:
    """One replay of the budget and the early-stop rule's counts over it."""

    result: ReplayResult
    rule: EarlyStop

    @property
    def client_warnings(self) -> tuple[str, ...]:
        return self.result.outcome.selfcheck().health_warnings()

    def measure(self) -> ReplayMeasure:
        outcome = self.result.outcome
        return ReplayMeasure(
            records=measured_records(outcome.records),
            complete=outcome.complete,
            tbt_certain_fail=self.rule.tbt_failed,
            ttft_certain_fail=self.rule.ttft_failed,
        )


async def verify_budget(
    config: SweepConfig,
    first: Schedule,
    reseeded: Callable[[int], Schedule],
    budget: int,
    role: Role,
    predicted: Predicted | None,
    *,
    early_stop: bool = True,
    on_start: Callable[..., None] | None = None,
    on_ready: Callable[..., None] | None = None,
    on_replay: Callable[..., None] | None = None,
    say: Callable[[str], None] | None = None,
    held: HeldEngine | None = None,
) -> Point:
    """Launch the engine at ``budget``, replay ``first`` (stopping once the verdict is clear,
    unless ``early_stop`` is off), replay ``reseeded(k)`` while the point is marginal or its
    client unhealthy (one repeating a replay set aside may stop early too), and describe the
    point. An engine that does not start is a point too. ``held``: the engine already runs at
    this budget (the profile step's): it is replayed on, and stopped at the end."""
    spec = budget_spec(config.base_spec, budget, config.run_dir)
    replay = ReplayConfig(
        engine=config.engine,
        spec=spec,
        run=config.run,
        traffic=config.traffic,
        output_dir=config.run_dir / f"budget-{budget}",
        command=config.command,
        config={**config.settings, "budget": budget},
        hardware=config.hardware,
    )
    started = time.perf_counter()
    done: list[Replayed] = []
    try:
        async with _engine(replay, held, on_start, on_ready) as handle:
            while True:
                again = len(done)
                # Only a replay the point would be judged on may stop early: the first, or one
                # repeating replays all set aside for the client's health. A replay for a
                # marginal verdict runs in full (stopping at a clear fail of its own would bias
                # the pool toward failing).
                stops = early_stop and all(r.client_warnings for r in done)
                schedule = first if again == 0 else reseeded(again)
                replayed = await _replay_once(handle, replay, config, schedule, again, stops,
                                              on_replay)  # fmt: skip
                done.append(replayed)
                point = point_of(config, budget, role, predicted, done, started)
                if replayed.result.save_error is not None:
                    # its results.json did not fit the disk: the point is saved by the caller
                    # (points.jsonl keeps room for it), then the sweep stops
                    raise NotSaved(point, replayed.result.save_error)
                why = remeasure_reason(point, done[-1], config)
                if why is None or len(done) >= config.max_replays:
                    return point
                if say is not None:
                    say(
                        f"  budget {budget}: {why}; replaying with fresh arrivals "
                        f"({len(done) + 1} of at most {config.max_replays})"
                    )
    except EngineError as error:
        if done:  # the engine started and served; only stopping it failed
            return point_of(config, budget, role, predicted, done, started)
        return Point(
            budget=budget,
            role=role,
            rate_per_s=config.rate_per_s,
            predicted=predicted,
            status=Status.ENGINE_FAILED,
            error=str(error),
            log_tail=error.log_tail,
            tbt_ok=None,
            ttft_ok=None,
            ok=False,
            wall_s=round(time.perf_counter() - started, 3),
            replays=0,
        )


async def _replay_once(
    handle: EngineHandle,
    replay: ReplayConfig,
    config: SweepConfig,
    schedule: Schedule,
    again: int,
    stops: bool,
    on_replay: Callable[..., None] | None,
) -> Replayed:
    """One replay of ``schedule`` on the running engine, counted by the early-stop rule (and
    stopped by it when ``stops``), saved as the budget's results (``replay-K`` for the K-th
    re-measure). Raises KeyboardInterrupt when Ctrl-C cut it: the point is unfinished, out of
    points.jsonl, and --resume runs it again."""
    rule = EarlyStop(
        schedule, config.run.warmup_requests, config.slo_tbt_s, config.slo_ttft_s, config.quantile
    )
    result = await replay_on(
        handle, replay, schedule, on_progress=on_replay, stop_rule=rule if stops else None
    )
    if not stops:
        rule(result.outcome.records)  # the same counts, for the record
    folder = replay.output_dir
    assert folder is not None
    save_replay(replay, result, folder / f"replay-{again + 1}" if again else folder)
    if result.outcome.stopped_by is StopReason.INTERRUPTED:
        raise KeyboardInterrupt
    return Replayed(result, rule)


@contextlib.asynccontextmanager
async def _engine(
    replay: ReplayConfig,
    held: HeldEngine | None,
    on_start: Callable[..., None] | None,
    on_ready: Callable[..., None] | None,
) -> AsyncIterator[EngineHandle]:
    """The engine to replay on: ``held`` (stopped on leaving), or one launched for ``replay``."""
    if held is None:
        async with launched(replay, on_start=on_start, on_ready=on_ready) as handle:
            yield handle
        return
    try:
        if on_ready is not None:
            on_ready(held.handle)
        yield held.handle
    finally:
        # Stopped here, blocking: the engine's own loop thread stops it, and a Ctrl-C that
        # cancels this task must not leave it running.
        held.close()


def remeasure_reason(point: Point, latest: Replayed, config: SweepConfig) -> str | None:
    """Why the budget should be replayed again (None: it should not): its verdict is marginal,
    or the load generator was unhealthy in its latest replay, or both. A budget whose engine
    crashed or whose replay was aborted is not replayed."""
    if not point.is_measured:
        return None
    reasons = []
    if point.marginal:
        p = f"p{config.percentile:g}"
        reasons.append("marginal: " + marginal_text(point, p, config.slo_tbt_s, config.slo_ttft_s))
    if latest.client_warnings:
        reasons.append(f"the load generator was unhealthy ({latest.client_warnings[0]})")
    return "; ".join(reasons) or None


def point_of(
    config: SweepConfig,
    budget: int,
    role: Role,
    predicted: Predicted | None,
    done: Sequence[Replayed],
    started: float,
) -> Point:
    """The point the replays so far make: pooled over the replays whose client was healthy
    (over all of them when none was). A replay set aside keeps its file (``replay_files``) and
    its warnings, marked as set aside; ``results_file`` and ``selfcheck`` are the first used
    replay's, so every figure of the point comes from replays it pools."""
    healthy = [r for r in done if not r.client_warnings]
    used = healthy or list(done)
    used_ids = {id(r) for r in used}  # by identity: a replay's records are not compared
    warnings = tuple(
        warning if id(r) in used_ids else f"replay {number} set aside: {warning}"
        for number, r in enumerate(done, start=1)
        for warning in r.client_warnings
    )
    verdict = judge_replays([r.measure() for r in used], config.slo)
    results = [r.result for r in used]
    crashed = next((r.engine_crashed for r in results if r.engine_crashed), None)
    aborted = next(
        (r for r in results if r.outcome.stopped_by not in (None, StopReason.EARLY_STOP)), None
    )
    status = Status.MEASURED
    if crashed:
        status = Status.CRASHED
    elif aborted is not None:
        status = Status.ABORTED
    first = results[0].outcome
    stopped_early = first.stopped_by is StopReason.EARLY_STOP
    is_measured = status is Status.MEASURED
    last = done[-1].result
    return Point(
        budget=budget,
        role=role,
        rate_per_s=config.rate_per_s,
        predicted=predicted,
        status=status,
        measured=SummaryMs.of(_pooled_summary(used)),
        tbt_ms=(verdict.tbt.estimate_s if verdict.tbt.samples else 0.0) * 1e3,
        ttft_ms=verdict.ttft.estimate_s * 1e3 if np.isfinite(verdict.ttft.estimate_s) else None,
        tbt_ok=verdict.tbt_ok if is_measured else None,
        ttft_ok=verdict.ttft_ok if is_measured else None,
        ok=is_measured and verdict.ok,
        complete=all(r.outcome.complete for r in results),
        stopped_by=StopReason.EARLY_STOP
        if stopped_early
        else (StopReason.ERROR_RATE if status is Status.ABORTED else None),
        stop_message=first.stop_reason if stopped_early else None,
        error=crashed or (aborted.outcome.stop_reason if aborted is not None else None),
        log_tail=last.engine.log_tail,
        engine=last.engine.to_json(log_tail=False),
        results_file=_file(used[0].result),
        selfcheck=used[0].result.outcome.selfcheck().to_json(),
        wall_s=round(time.perf_counter() - started, 3),
        tbt_ci_ms=interval_ms(verdict.tbt),
        ttft_ci_ms=interval_ms(verdict.ttft),
        confidence=verdict.confidence if is_measured else None,
        replays=verdict.replays,
        client_warnings=warnings,
        replay_files=tuple(
            f for r in done if r is not used[0] and (f := _file(r.result)) is not None
        ),
        prefix_cache=_pooled_cache(used),
    )


def _file(result: ReplayResult) -> str | None:
    return str(result.results_file) if result.results_file else None


def _pooled_cache(used: Sequence[Replayed]) -> PrefixCacheCount | None:
    """The engine's prefix-cache counters summed over the replays judged (each replay's own
    prompts: none hits another's); None when the engine counts none."""
    counts = [PrefixCacheCount.from_counters(r.result.server.counters) for r in used]
    if any(count is None for count in counts):
        return None
    return PrefixCacheCount(
        sum(c.queries_tokens for c in counts if c is not None),
        sum(c.hits_tokens for c in counts if c is not None),
    )


def _pooled_summary(used: Sequence[Replayed]) -> MetricsSummary:
    """Every metric over the replays' records pooled; throughput is their mean (each replay's
    clock starts at zero, so pooled records do not share one span)."""
    records = [record for r in used for record in r.measure().records]
    pooled = summarize(records)
    throughputs = [summarize(r.measure().records).throughput_tokens_per_s for r in used]
    return dataclasses.replace(pooled, throughput_tokens_per_s=float(np.mean(throughputs)))


__all__ = ["BudgetVerdict", "Replayed", "point_of", "remeasure_reason", "verify_budget"]
