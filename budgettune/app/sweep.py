"""`sweep`: candidates from the step-time model, predictions from the simulator, live verification
of as few budgets as the interval search needs, then the verdict and the engine configs.

Every finished budget is appended to ``points.jsonl`` at once; ``resume`` re-runs none of them.
No flag parsing and no tables here: the CLI passes a :class:`SweepConfig` and callbacks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgettune.app.profile import ProfileConfig, ProfileOutcome, run_profile
from budgettune.app.profile import validate as validate_profile
from budgettune.app.replay import ReplayConfig, run_replay
from budgettune.artifacts.engine_config import FixedSettings
from budgettune.artifacts.recommendation import (
    recommendation_document,
    sweep_results,
    write_outputs,
)
from budgettune.artifacts.results import save_results
from budgettune.artifacts.runfolder import append_point, create_run_folder, resume_run_folder
from budgettune.core.errors import EngineError
from budgettune.core.hardware import resolve_model
from budgettune.core.metrics import MetricsSummary, quantile, summarize, tbt_s, ttft_s
from budgettune.core.units import ms_or_none
from budgettune.engines.base import EngineHandle, StartProgress
from budgettune.engines.registry import get_engine
from budgettune.loadgen.runner import RunProgress, Target, run_schedule
from budgettune.loadgen.stop import StopReason
from budgettune.model.profile import Profile, load_profile
from budgettune.profiling.plan import ProgressFn
from budgettune.trace.schedule import Schedule
from budgettune.tune.candidates import Candidates, budget_candidates
from budgettune.tune.early_stop import EarlyStop
from budgettune.tune.goodput import GoodputResult, find_goodput
from budgettune.tune.point import (
    AtSlo,
    Goodput,
    GoodputProbe,
    Point,
    Predicted,
    Role,
    Status,
    SummaryMs,
)
from budgettune.tune.predict import Prediction, predict, typical_context_tokens
from budgettune.tune.select import Recommendation, recommend
from budgettune.tune.strategy import SearchState, Verdict, next_index
from budgettune.tune.sweep_config import SweepConfig

PROFILE_FILE = "profile.json"  # the profile a sweep on a real engine measures first
PROFILE_MIN_TOKENS = 256
PROFILE_DEFAULT_MAX_TOKENS = 8192  # `budgettune profile`'s default --max-tokens
PROFILE_MAX_BATCH = 256  # `budgettune profile`'s default --max-batch


@dataclass(slots=True)
class SweepEvents:
    """Callbacks for the live display; every one optional."""

    on_plan: Callable[[Candidates, dict[int, Prediction]], None] | None = None
    on_launch: Callable[[int, str], None] | None = None  # budget, role
    on_start: Callable[[StartProgress], None] | None = None
    on_ready: Callable[[EngineHandle], None] | None = None
    on_replay: Callable[[RunProgress], None] | None = None
    on_point: Callable[[Point], None] | None = None
    on_message: Callable[[str], None] | None = None


@dataclass(slots=True)
class SweepResult:
    candidates: Candidates
    predictions: dict[int, Prediction]
    points: list[Point]
    recommendation: Recommendation
    launches: int  # engine launches this invocation made (resumed points not counted)
    wall_s: float
    files: dict[str, Path]
    document: dict[str, object]  # what recommendation.json holds


def open_run(run_dir: Path, settings: Mapping[str, object], *, resume: bool) -> list[Point]:
    """Start the run folder (its ``sweep.json``) or, resuming, check it asked the same question;
    returns the points it already holds. Raises UserError for a folder that cannot be used."""
    if resume:
        return resume_run_folder(run_dir, settings)
    create_run_folder(run_dir, settings)
    return []


def profile_config(
    run_dir: Path,
    *,
    engine: str,
    model: str,
    gpu: str | None,
    max_num_seqs: int,
    budgets: Sequence[int] | None = None,
    reference_budget: int | None = None,
    seed: int = 0,
    dtype: str | None = None,
    tensor_parallel: int | None = None,
    gpu_memory_utilization: float | None = None,
    engine_args: tuple[str, ...] = (),
    engine_cmd: tuple[str, ...] | None = None,
    engine_env: dict[str, str] | None = None,
    health_timeout_s: float | None = None,
) -> ProfileConfig:
    """The profile step of a sweep on a real engine: `budgettune profile`'s defaults, with
    prompts up to the largest budget the sweep considers (``budgets`` and the reference; without
    ``budgets``, at least the profile's default 8192: no iteration holds more than its budget),
    capped at the model's length, and decode batches up to ``max_num_seqs`` (none can be
    larger), written to ``<run>/profile.json``. Raises SpecError for a model it cannot read."""
    considered = [*(budgets or ()), *([reference_budget] if reference_budget else [])]
    if not budgets:
        considered.append(PROFILE_DEFAULT_MAX_TOKENS)
    limit = resolve_model(model).max_position_embeddings
    max_tokens = max(PROFILE_MIN_TOKENS, *considered)
    config = ProfileConfig(
        model=model,
        engine=engine,
        gpu_name=gpu or "auto",
        max_tokens=min(max_tokens, limit) if limit else max_tokens,
        max_batch=min(PROFILE_MAX_BATCH, max_num_seqs),
        output=run_dir / PROFILE_FILE,
        dtype=dtype or "auto",
        seed=seed,
        tensor_parallel=tensor_parallel or 1,
        gpu_memory_utilization=gpu_memory_utilization,
        engine_args=engine_args,
        engine_cmd=engine_cmd,
        engine_env=dict(engine_env or {}),
        health_timeout_s=health_timeout_s,
        log_path=run_dir / "engine-profile.log",
    )
    validate_profile(config)
    return config


def saved_profile(run_dir: Path) -> Profile | None:
    """The complete profile an earlier run of this sweep measured, None when there is none (or
    only a partial one, which is measured again)."""
    path = run_dir / PROFILE_FILE
    if not path.is_file():
        return None
    profile = load_profile(path)
    return profile if profile.complete and profile.step is not None else None


def profile_first(
    config: ProfileConfig,
    *,
    progress: ProgressFn | None = None,
    on_start: Callable[[StartProgress], None] | None = None,
) -> ProfileOutcome:
    """Run `budgettune profile` into the run folder: profile.json, the curve as profile.csv and
    the report profile.html. A profile that stops early is saved as far as it got and its
    EngineError raised (the sweep stops with it)."""
    outcome = run_profile(config, progress=progress, on_start=on_start)
    if outcome.json_path is not None:
        from budgettune.app.report import run_report  # plotly: only when a page is due

        run_report(outcome.json_path, output=outcome.json_path.with_suffix(".html"))
    return outcome


def plan(
    config: SweepConfig, schedule: Schedule
) -> tuple[Candidates, dict[int, Prediction], float]:
    """Candidates and the simulator's prediction for each (plus the engine default)."""
    q = config.quantile
    warmup = config.run.warmup_requests
    probe_budget = config.default_budget or 2048
    baseline = predict(
        schedule, config.step_model, config.scheduler, probe_budget, q=q, warmup_requests=warmup
    )
    context = typical_context_tokens(schedule)
    derived = budget_candidates(
        config.step_model,
        slo_tbt_s=config.slo_tbt_s,
        decode_batch=baseline.decode_batch,
        context_tokens=context,
        align=config.align_tokens,
    )
    candidates = (
        dataclasses.replace(derived, budgets=tuple(sorted(set(config.budgets))))
        if config.budgets
        else derived
    )
    predictions = {probe_budget: baseline}
    for budget in {
        *candidates.budgets,
        *([config.default_budget] if config.default_budget else []),
    }:
        if budget not in predictions:
            predictions[budget] = predict(
                schedule, config.step_model, config.scheduler, budget, q=q, warmup_requests=warmup
            )
    return candidates, predictions, context


async def run_sweep(
    config: SweepConfig,
    schedule: Schedule,
    schedule_at: Callable[[float], Schedule],
    events: SweepEvents | None = None,
    finished: Sequence[Point] = (),
) -> SweepResult:
    """Plan, verify live, recommend, and write the run folder, which :func:`open_run` made
    (``finished``: the points it already holds, none of them re-run). An engine that fails at
    one budget is recorded and skipped."""
    events = events or SweepEvents()
    started = time.perf_counter()
    done: dict[int, Point] = {point.budget: point for point in finished}
    candidates, predictions, _ = plan(config, schedule)
    if events.on_plan:
        events.on_plan(candidates, predictions)
    slo = config.slo
    predicted = {}
    for budget, prediction in predictions.items():
        judgement = slo.judge_at(prediction.tbt_s, prediction.ttft_s)
        predicted[budget] = Verdict(tbt_ok=judgement.tbt_ok, ttft_ok=judgement.ttft_ok)
    launches = 0

    async def measure(budget: int, role: Role) -> None:
        nonlocal launches
        launches += 1
        if events.on_launch:
            events.on_launch(budget, role)
        point = await _verify(
            config,
            schedule,
            budget,
            role,
            predictions.get(budget),
            events,
            early_stop=not config.exhaustive,
        )
        append_point(config.run_dir, point)
        done[budget] = point
        if events.on_point:
            events.on_point(point)

    for budget in candidates.budgets if config.exhaustive else ():
        if budget not in done:
            await measure(budget, Role.CANDIDATE)
    while not config.exhaustive:
        usable = [b for b in candidates.budgets if b not in done or done[b].is_measured]
        state = SearchState(n=len(usable))
        for position, budget in enumerate(usable):
            if budget in done:
                state.record(position, Verdict(bool(done[budget].tbt_ok),
                                               bool(done[budget].ttft_ok)))  # fmt: skip
        chosen = next_index(state, [predicted[b] for b in usable])
        if chosen is None:
            break
        await measure(usable[chosen], Role.CANDIDATE)
    if config.default_budget is not None and config.default_budget not in done:
        await measure(config.default_budget, Role.REFERENCE)
    points = [done[b] for b in sorted(done)]
    if config.goodput:
        points = await _goodput(config, schedule_at, points, events)
    recommendation = recommend(
        points,
        slo_tbt_s=config.slo_tbt_s,
        slo_ttft_s=config.slo_ttft_s,
        percentile=config.percentile,
        rate_per_s=config.rate_per_s,
        asked_rate_per_s=config.asked_rate_per_s,
        requests=config.requests,
        default_budget=config.default_budget,
        candidates=candidates,
        baseline_label=config.baseline_label,
    )
    wall_s = time.perf_counter() - started
    document = recommendation_document(
        config, candidates, predictions, points, recommendation, launches, wall_s
    )
    files = write_outputs(
        config.run_dir,
        recommendation,
        document=document,
        max_num_seqs=config.scheduler.max_num_seqs,
        served_model=config.served_model,
        fixed=FixedSettings(
            max_model_len=config.base_spec.max_model_len,
            tensor_parallel_size=config.base_spec.tensor_parallel_size,
            gpu_memory_utilization=config.base_spec.gpu_memory_utilization,
            dtype=config.base_spec.dtype,
        )
        if config.served_model
        else None,
    )
    files["results"] = save_results(sweep_results(config, document, points), config.run_dir)
    if (config.run_dir / PROFILE_FILE).is_file():  # the profile step's, or an earlier run's
        files["profile"] = config.run_dir / PROFILE_FILE
    from budgettune.app.report import run_report  # plotly loads only when a page is written

    files["report"] = run_report(config.run_dir).path
    return SweepResult(
        candidates, predictions, points, recommendation, launches, wall_s, files, document
    )


async def _verify(
    config: SweepConfig,
    schedule: Schedule,
    budget: int,
    role: Role,
    prediction: Prediction | None,
    events: SweepEvents,
    *,
    early_stop: bool = True,
) -> Point:
    """Launch the engine at ``budget``, replay (stopping once the verdict is certain, unless
    ``early_stop`` is off), and describe the point."""
    rule = EarlyStop(
        schedule,
        config.run.warmup_requests,
        config.slo_tbt_s,
        config.slo_ttft_s,
        config.quantile,
    )
    spec = dataclasses.replace(
        config.base_spec,
        budget_tokens=budget,
        chunked_prefill=True,
        log_path=config.run_dir / f"engine-{budget}.log",
    )
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
    predicted = None if prediction is None else Predicted.of(prediction)
    started = time.perf_counter()
    try:
        result = await run_replay(
            replay,
            schedule,
            on_start=events.on_start,
            on_ready=events.on_ready,
            on_progress=events.on_replay,
            stop_rule=rule if early_stop else None,
        )
    except EngineError as error:
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
        )
    outcome = result.outcome
    if outcome.stopped_by is StopReason.INTERRUPTED:
        # Ctrl-C: the point is not finished; leave it out of points.jsonl so --resume reruns it.
        raise KeyboardInterrupt
    stopped_early = outcome.stopped_by is StopReason.EARLY_STOP
    measured = outcome.measured()
    summary = result.summary
    if stopped_early:
        # Requests the early stop cancelled in flight are our doing, not the engine's failures:
        # the partial figures cover the requests that finished on their own.
        measured = [
            live.record for live in outcome.records if not live.warmup and not live.cancelled
        ]
        summary = summarize(measured)
    status = Status.MEASURED
    if result.engine_crashed:
        status = Status.CRASHED
    elif outcome.stopped_by is not None and not stopped_early:
        status = Status.ABORTED
    tbt_q = _quantile_or_zero(tbt_s(measured), config.quantile)
    ttft_q = quantile(ttft_s(measured), config.quantile)
    complete = outcome.complete
    # A verdict the early stop made certain is final; the other SLO, cut short, is unknown and
    # counted as met so that it prunes no budget it has not proven infeasible.
    if not early_stop:
        rule(outcome.records)  # the same counts, for the record, without stopping
    judgement = config.slo.judge_at(tbt_q, ttft_q)
    tbt_ok = not rule.tbt_failed and (judgement.tbt_ok or not complete)
    ttft_ok = not rule.ttft_failed and (judgement.ttft_ok or not complete)
    is_measured = status is Status.MEASURED
    return Point(
        budget=budget,
        role=role,
        rate_per_s=config.rate_per_s,
        predicted=predicted,
        status=status,
        measured=SummaryMs.of(summary),
        tbt_ms=tbt_q * 1e3,
        ttft_ms=ttft_q * 1e3 if ttft_q != float("inf") else None,
        tbt_ok=tbt_ok if is_measured else None,
        ttft_ok=ttft_ok if is_measured else None,
        ok=is_measured and tbt_ok and ttft_ok,
        complete=complete,
        stopped_by=StopReason.EARLY_STOP
        if stopped_early
        else (StopReason.ERROR_RATE if status is Status.ABORTED else None),
        stop_message=outcome.stop_reason if stopped_early else None,
        error=result.engine_crashed or (outcome.stop_reason if status is Status.ABORTED else None),
        log_tail=result.engine.log_tail,
        engine=result.engine.to_json(log_tail=False),
        results_file=str(result.results_file) if result.results_file else None,
        selfcheck=outcome.selfcheck().to_json(),
        wall_s=round(time.perf_counter() - started, 3),
    )


def _quantile_or_zero(values: Any, q: float) -> float:
    return quantile(values, q) if len(values) else 0.0


async def _goodput(
    config: SweepConfig,
    schedule_at: Callable[[float], Schedule],
    points: list[Point],
    events: SweepEvents,
) -> list[Point]:
    """``points`` with each measured budget's highest sustainable rate, one engine launch per
    budget.

    :func:`search.find_goodput` is synchronous; it runs in a worker thread and each of its
    probes is a replay submitted back to this event loop on the same running engine.
    """
    loop = asyncio.get_running_loop()
    slo = config.slo
    out = []
    for point in points:
        if not point.is_measured:
            out.append(point)
            continue
        budget = point.budget
        spec = dataclasses.replace(
            config.base_spec,
            budget_tokens=budget,
            log_path=config.run_dir / f"engine-{budget}-goodput.log",
        )
        _say(events, f"goodput search at budget {budget}")
        async with get_engine(config.engine).launch(spec, events.on_start) as handle:
            target = Target(handle.url, handle.model)

            def evaluate(rate: float, target: Target = target) -> MetricsSummary:
                future = asyncio.run_coroutine_threadsafe(
                    run_schedule(schedule_at(rate), target, config.run), loop
                )
                outcome = future.result()
                return summarize(
                    [live.record for live in outcome.records],
                    warmup_requests=config.run.warmup_requests,
                    slo_quantile=config.quantile,  # the search judges at --percentile
                )

            result = await asyncio.to_thread(
                find_goodput, evaluate, slo, start_rate_per_s=config.rate_per_s
            )
        out.append(dataclasses.replace(point, goodput=_goodput_of(result)))
    return out


def _goodput_of(result: GoodputResult) -> Goodput:
    """The search's rate and every probe with the figures its verdict was judged on."""
    probes = []
    for probe in result.probes:
        at = probe.summary.at_quantile
        probes.append(
            GoodputProbe(
                rate_per_s=probe.rate_per_s,
                met=probe.met,
                tbt_p99_ms=ms_or_none(probe.summary.tbt_s.p99),
                ttft_p99_ms=ms_or_none(probe.summary.ttft_s.p99),
                at_slo=None if at is None else AtSlo(ms_or_none(at.tbt_s), ms_or_none(at.ttft_s)),
                failed=probe.summary.failed,
            )
        )
    return Goodput(rate_per_s=result.rate_per_s, capped=result.capped, probes=tuple(probes))


def _say(events: SweepEvents, text: str) -> None:
    if events.on_message:
        events.on_message(text)
