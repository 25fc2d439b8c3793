"""`sweep`: candidates from the step-time model, predictions from the simulator, live verification
of as few budgets as the interval search needs, then the verdict and the engine configs.

Every finished budget is appended to ``points.jsonl`` at once; ``resume`` re-runs none of them.
No flag parsing and no tables here: the CLI passes a :class:`SweepConfig` and callbacks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgettune import __version__
from budgettune.engine.base import EngineHandle, LaunchSpec, StartProgress
from budgettune.engine.registry import get_engine
from budgettune.errors import EngineError
from budgettune.load.runner import RunOptions, RunProgress, Target, run_schedule
from budgettune.metrics import MetricsSummary, quantile, summarize, tbt_s, ttft_s
from budgettune.pipeline.replay import ReplayConfig, run_replay
from budgettune.report.engine_config import FixedSettings
from budgettune.results import Results, load_results, save_results
from budgettune.search import SLO, find_goodput
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.stepmodel import StepModel
from budgettune.sweep.candidates import Candidates, budget_candidates
from budgettune.sweep.early_stop import EarlyStop
from budgettune.sweep.predict import Prediction, predict, typical_context_tokens
from budgettune.sweep.runfolder import append_point, create_run_folder, resume_run_folder
from budgettune.sweep.strategy import SearchState, Verdict, next_index
from budgettune.sweep.verdict import Recommendation, recommend, write_outputs
from budgettune.trace.schedule import Schedule

# Points whose engine failed to start, crashed or was aborted say nothing about the budget:
# they are kept and shown, and the search goes on without them.
MEASURED = "measured"


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """Everything one sweep needs, validated by the caller."""

    slo_tbt_s: float
    slo_ttft_s: float
    percentile: float  # e.g. 99.0
    engine: str
    base_spec: LaunchSpec
    run: RunOptions
    step_model: StepModel
    model_source: str  # where the step-time model came from, for the report
    scheduler: SchedulerConfig  # the prediction's scheduler (budget replaced per candidate)
    traffic: str
    rate_per_s: float
    run_dir: Path
    budgets: tuple[int, ...] | None = None  # None: derive candidates from the model
    align_tokens: int = 256
    default_budget: int | None = None  # the "what you run today" line (engine default or given)
    baseline_label: str = "Your engine default"
    goodput: bool = False
    exhaustive: bool = False  # verify every candidate in full (the grid peers run), no search
    resume: bool = False
    settings: dict[str, Any] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    hardware: dict[str, Any] | None = None
    served_model: str | None = None  # the model path/name for the written engine configs

    @property
    def quantile(self) -> float:
        return self.percentile / 100.0


@dataclass(slots=True)
class SweepEvents:
    """Callbacks for the live display; every one optional."""

    on_plan: Callable[[Candidates, dict[int, Prediction]], None] | None = None
    on_launch: Callable[[int, str], None] | None = None  # budget, role
    on_start: Callable[[StartProgress], None] | None = None
    on_ready: Callable[[EngineHandle], None] | None = None
    on_replay: Callable[[RunProgress], None] | None = None
    on_point: Callable[[dict[str, Any]], None] | None = None
    on_message: Callable[[str], None] | None = None


@dataclass(slots=True)
class SweepResult:
    candidates: Candidates
    predictions: dict[int, Prediction]
    points: list[dict[str, Any]]
    recommendation: Recommendation
    launches: int  # engine launches this invocation made (resumed points not counted)
    wall_s: float
    files: dict[str, Path]
    document: dict[str, Any]  # what recommendation.json holds


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
) -> SweepResult:
    """Plan, verify live, recommend, and write the run folder. Raises UserError for a run folder
    that cannot be used; an engine that fails at one budget is recorded and skipped."""
    events = events or SweepEvents()
    started = time.perf_counter()
    settings = {**config.settings, "schema_version": 1, "budgettune_version": __version__}
    done: dict[int, dict[str, Any]] = {}
    if config.resume:
        for point in resume_run_folder(config.run_dir, settings):
            done[int(point["budget"])] = point
        _say(events, f"resuming {config.run_dir}: {len(done)} budget(s) already measured")
    else:
        create_run_folder(config.run_dir, settings)
    candidates, predictions, _ = plan(config, schedule)
    if events.on_plan:
        events.on_plan(candidates, predictions)
    predicted = {
        b: Verdict(tbt_ok=p.tbt_s <= config.slo_tbt_s, ttft_ok=p.ttft_s <= config.slo_ttft_s)
        for b, p in predictions.items()
    }
    launches = 0

    async def measure(budget: int, role: str) -> None:
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
            await measure(budget, "candidate")
    while not config.exhaustive:
        usable = [b for b in candidates.budgets if b not in done or done[b]["status"] == MEASURED]
        state = SearchState(n=len(usable))
        for position, budget in enumerate(usable):
            if budget in done:
                state.record(position, Verdict(done[budget]["tbt_ok"], done[budget]["ttft_ok"]))
        chosen = next_index(state, [predicted[b] for b in usable])
        if chosen is None:
            break
        await measure(usable[chosen], "candidate")
    if config.default_budget is not None and config.default_budget not in done:
        await measure(config.default_budget, "reference")
    points = [done[b] for b in sorted(done)]
    if config.goodput:
        await _goodput(config, schedule_at, points, events)
    recommendation = recommend(
        points,
        slo_tbt_s=config.slo_tbt_s,
        slo_ttft_s=config.slo_ttft_s,
        percentile=config.percentile,
        rate_per_s=config.rate_per_s,
        default_budget=config.default_budget,
        candidates=candidates,
        baseline_label=config.baseline_label,
    )
    wall_s = time.perf_counter() - started
    document = _recommendation_document(
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
    files["results"] = save_results(_results(config, document, points), config.run_dir)
    from budgettune.pipeline.report import run_report  # plotly loads only when a page is written

    files["report"] = run_report(config.run_dir).path
    return SweepResult(
        candidates, predictions, points, recommendation, launches, wall_s, files, document
    )


async def _verify(
    config: SweepConfig,
    schedule: Schedule,
    budget: int,
    role: str,
    prediction: Prediction | None,
    events: SweepEvents,
    *,
    early_stop: bool = True,
) -> dict[str, Any]:
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
    point: dict[str, Any] = {
        "budget": budget,
        "role": role,
        "rate": config.rate_per_s,
        "predicted": _prediction_json(prediction),
    }
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
        point.update(
            status="engine_failed",
            error=str(error),
            log_tail=error.log_tail,
            tbt_ok=None,
            ttft_ok=None,
            ok=False,
            wall_s=round(time.perf_counter() - started, 3),
        )
        return point
    stop_reason = result.outcome.stop_reason
    if stop_reason is not None and stop_reason.startswith("interrupted"):
        # Ctrl-C: the point is not finished; leave it out of points.jsonl so --resume reruns it.
        raise KeyboardInterrupt
    stopped_early = stop_reason is not None and stop_reason.startswith("early stop")
    measured = result.outcome.measured()
    summary = result.summary
    if stopped_early:
        # Requests the early stop cancelled in flight are our doing, not the engine's failures:
        # the partial figures cover the requests that finished on their own.
        measured = [r for r in measured if not (r.error or "").startswith("cancelled")]
        summary = summarize(measured)
    status = MEASURED
    if result.engine_crashed:
        status = "crashed"
    elif stop_reason is not None and not stopped_early:
        status = "aborted"
    tbt_q = _quantile_or_zero(tbt_s(measured), config.quantile)
    ttft_q = quantile(ttft_s(measured), config.quantile)
    complete = result.outcome.complete
    # A verdict the early stop made certain is final; the other SLO, cut short, is unknown and
    # counted as met so that it prunes no budget it has not proven infeasible.
    if not early_stop:
        rule(result.outcome.records)  # the same counts, for the record, without stopping
    tbt_ok = not rule.tbt_failed and (tbt_q <= config.slo_tbt_s or not complete)
    ttft_ok = not rule.ttft_failed and (ttft_q <= config.slo_ttft_s or not complete)
    point.update(
        status=status,
        measured=summary.to_json(),
        tbt_ms=tbt_q * 1e3,
        ttft_ms=ttft_q * 1e3 if ttft_q != float("inf") else None,
        tbt_ok=tbt_ok if status == MEASURED else None,
        ttft_ok=ttft_ok if status == MEASURED else None,
        ok=status == MEASURED and tbt_ok and ttft_ok,
        complete=complete,
        early_stop=stop_reason if stopped_early else None,
        error=result.engine_crashed or (stop_reason if status == "aborted" else None),
        log_tail=result.engine.get("log_tail"),
        engine={k: v for k, v in result.engine.items() if k != "log_tail"},
        results_file=str(result.results_file) if result.results_file else None,
        selfcheck=result.outcome.selfcheck(),
        wall_s=round(time.perf_counter() - started, 3),
    )
    return point


def _quantile_or_zero(values: Any, q: float) -> float:
    return quantile(values, q) if len(values) else 0.0


def _ms_or_none(value_s: float) -> float | None:
    return value_s * 1e3 if value_s == value_s and value_s != float("inf") else None


def _prediction_json(prediction: Prediction | None) -> dict[str, Any] | None:
    """The simulator's summary (percentile objects, like a measured point) plus the TBT and TTFT
    at the sweep's SLO percentile (``*_at_slo_ms``) and the mean decode batch."""
    if prediction is None:
        return None
    return {
        **prediction.summary.to_json(),
        "tbt_at_slo_ms": _ms_or_none(prediction.tbt_s),
        "ttft_at_slo_ms": _ms_or_none(prediction.ttft_s),
        "decode_batch": prediction.decode_batch,
    }


async def _goodput(
    config: SweepConfig,
    schedule_at: Callable[[float], Schedule],
    points: list[dict[str, Any]],
    events: SweepEvents,
) -> None:
    """Each measured budget's highest sustainable rate, one engine launch per budget.

    :func:`search.find_goodput` is synchronous; it runs in a worker thread and each of its
    probes is a replay submitted back to this event loop on the same running engine.
    """
    loop = asyncio.get_running_loop()
    slo = SLO(tbt_s=config.slo_tbt_s, ttft_s=config.slo_ttft_s)
    for point in points:
        if point["status"] != MEASURED:
            continue
        budget = int(point["budget"])
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
                )

            result = await asyncio.to_thread(
                find_goodput, evaluate, slo, start_rate_per_s=config.rate_per_s
            )
        point["goodput_rate"] = result.rate_per_s
        point["goodput_capped"] = result.capped
        point["goodput_probes"] = [
            {
                "rate": probe.rate_per_s,
                "met": probe.met,
                "tbt_p99_ms": _ms_or_none(probe.summary.tbt_s.p99),
                "ttft_p99_ms": _ms_or_none(probe.summary.ttft_s.p99),
                "failed": probe.summary.failed,
            }
            for probe in result.probes
        ]


def _recommendation_document(
    config: SweepConfig,
    candidates: Candidates,
    predictions: dict[int, Prediction],
    points: list[dict[str, Any]],
    recommendation: Recommendation,
    launches: int,
    wall_s: float,
) -> dict[str, Any]:
    """recommendation.json: versioned, self-describing, enough to rebuild the report."""
    return {
        "schema_version": 1,
        "kind": "sweep",
        "budgettune_version": __version__,
        "budget": recommendation.budget_tokens,
        "choice": recommendation.to_json(),
        "slo": {
            "tbt_ms": config.slo_tbt_s * 1e3,
            "ttft_ms": config.slo_ttft_s * 1e3,
            "percentile": config.percentile,
        },
        "load": {"rate_per_s": config.rate_per_s, "traffic": config.traffic},
        "engine": {"name": config.engine, "default_budget": config.default_budget},
        "model_source": config.model_source,
        "hardware": config.hardware,
        "candidates": {
            "budgets": list(candidates.budgets),
            "floor_tokens": candidates.floor_tokens,
            "ceiling_tokens": candidates.ceiling_tokens,
            "ridge_tokens": candidates.ridge_tokens,
            "decode_batch": candidates.decode_batch,
            "align_tokens": config.align_tokens,
        },
        "predictions": {str(b): _prediction_json(p) for b, p in sorted(predictions.items())},
        "points": points,
        "launches": launches,
        "exhaustive": config.exhaustive,
        "wall_s": round(wall_s, 3),
        "command": list(config.command),
        "settings": config.settings,
    }


def _results(
    config: SweepConfig, document: dict[str, Any], points: list[dict[str, Any]]
) -> Results:
    """results.json of the sweep: every point with its measured summary at the top level (the
    shape of a replay point), the prediction, the verdict, and the raw per-request records read
    back from the point's own replay results, so the report needs nothing else."""
    full_points = []
    for point in points:
        full = {**point, **(point.get("measured") or {})}
        full.pop("measured", None)
        replay_file = point.get("results_file")
        if replay_file:
            replay = load_results(Path(replay_file))
            full["records"] = replay.points[0].get("records", []) if replay.points else []
        full_points.append(full)
    summary = {k: v for k, v in document.items() if k not in ("points", "settings", "command")}
    return Results(
        kind="sweep",
        config={**config.settings, "sweep": summary},
        points=full_points,
        command=list(config.command),
        engine={"name": config.engine, "default_budget": config.default_budget},
        hardware=config.hardware,
    )


def _say(events: SweepEvents, text: str) -> None:
    if events.on_message:
        events.on_message(text)
