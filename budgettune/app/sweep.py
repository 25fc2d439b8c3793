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

from budgettune.app.executors import Executor, InProcess, RoundEvents
from budgettune.app.launch import budgets_taken, prefix_caching_setting
from budgettune.app.profile import ProfileConfig, ProfileOutcome, run_profile
from budgettune.app.profile import validate as validate_profile
from budgettune.app.requests import PROFILE_MAX_BATCH, PROFILE_MAX_TOKENS
from budgettune.app.rounds import verify_in_rounds
from budgettune.app.slots import Slot
from budgettune.app.traffic import Traffic
from budgettune.artifacts.engine_config import FixedSettings
from budgettune.artifacts.recommendation import (
    RunFacts,
    finished_document,
    recommendation_document,
    sweep_results,
    write_outputs,
)
from budgettune.artifacts.results import save_results
from budgettune.artifacts.runfolder import (
    check_new_run_folder,
    create_run_folder,
    lock_run_folder,
    resume_run_folder,
)
from budgettune.core.hardware import resolve_model
from budgettune.core.metrics import MetricsSummary, summarize
from budgettune.core.units import ms_or_none
from budgettune.engines.base import EngineHandle, LaunchSpec, StartProgress
from budgettune.engines.registry import get_engine
from budgettune.loadgen.runner import RunProgress, Target, run_schedule
from budgettune.model.profile import Profile, load_profile
from budgettune.profiling.plan import ProgressFn
from budgettune.trace.schedule import Schedule
from budgettune.tune.candidates import Candidates, budget_candidates
from budgettune.tune.goodput import GoodputResult, find_goodput
from budgettune.tune.pair_grid import PairsOutcome
from budgettune.tune.point import (
    AtSlo,
    Goodput,
    GoodputProbe,
    Point,
    Role,
    Status,
)
from budgettune.tune.predict import Prediction, predict, typical_context_tokens
from budgettune.tune.select import Recommendation, recommend
from budgettune.tune.sweep_config import SweepConfig

PROFILE_FILE = "profile.json"  # the profile a sweep on a real engine measures first
PROFILE_MIN_TOKENS = 256


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
    on_slot: Callable[[int, str], None] | None = None  # slot index, what it does now
    on_round: Callable[[int, Sequence[tuple[int, Role]]], None] | None = None  # round, budgets


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
    pairs: PairsOutcome | None = None  # two knobs: the (budget, max-num-seqs) grid

    @property
    def engine_failure(self) -> Point | None:
        """The first point when no budget was measured at all (every engine failed to start,
        crashed, or answered too many errors): the sweep then failed, it found no answer."""
        if not self.points or any(point.is_measured for point in self.points):
            return None
        return self.points[0]


def open_run(run_dir: Path, settings: Mapping[str, object], *, resume: bool) -> list[Point]:
    """Start the run folder (its ``sweep.json``) or, resuming, check it asked the same question;
    returns the points it already holds. Raises UserError for a folder that cannot be used."""
    if not resume:
        check_new_run_folder(run_dir)  # refused before the lock file is made in it
    # One process per run folder, before anything in it is read. create_run_folder checks the
    # folder again under the lock: a sweep that ended between the check and the lock left one.
    lock_run_folder(run_dir, field="resume" if resume else "output")
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
    launch: LaunchSpec,
    engine_env: Mapping[str, str],
    budgets: Sequence[int] | None = None,
    reference_budget: int | None = None,
    seed: int = 0,
    engine_spec: LaunchSpec | None = None,
) -> ProfileConfig:
    """The profile step of a sweep on a real engine: `budgettune profile`'s defaults, with
    prompts up to the largest budget the sweep considers (``budgets`` and the reference; without
    ``budgets``, at least the profile's default 8192: no iteration holds more than its budget),
    capped at the model's length, and decode batches up to ``max_num_seqs`` (none can be
    larger), written to ``<run>/profile.json``. The engine is started as the sweep's ``launch``
    says (its command, arguments, dtype, parallelism, memory share, health timeout and key),
    with ``engine_env``. Raises SpecError for a model it cannot read.

    ``engine_spec``: the profile runs on that engine (a budget the sweep measures) and keeps it
    running; its prompts stop where a prompt and the decode batch still fit one iteration of its
    budget, and the batch leaves a sequence for the prompt."""
    considered = [*(budgets or ()), *([reference_budget] if reference_budget else [])]
    if not budgets:
        considered.append(PROFILE_MAX_TOKENS)
    limit = resolve_model(model).max_position_embeddings
    max_tokens = max(PROFILE_MIN_TOKENS, *considered)
    max_batch = min(PROFILE_MAX_BATCH, max_num_seqs)
    log_path = run_dir / "engine-profile.log"
    if engine_spec is not None and engine_spec.budget_tokens is not None:
        max_batch = held_profile_batch(max_num_seqs)
        max_tokens = min(max_tokens, engine_spec.budget_tokens - max_batch)
        log_path = engine_spec.log_path or log_path
    config = ProfileConfig(
        model=model,
        engine=engine,
        gpu_name=gpu or "auto",
        max_tokens=min(max_tokens, limit) if limit else max_tokens,
        max_batch=max_batch,
        output=run_dir / PROFILE_FILE,
        dtype=launch.dtype or "auto",
        seed=seed,
        tensor_parallel=launch.tensor_parallel_size or 1,
        gpu_memory_utilization=launch.gpu_memory_utilization,
        engine_args=launch.extra_args,
        engine_cmd=launch.engine_cmd,
        engine_env=dict(engine_env),
        health_timeout_s=launch.health_timeout_s,
        log_path=log_path,
        api_key=launch.api_key,
        engine_spec=engine_spec,
    )
    validate_profile(config)
    return config


def held_profile_batch(max_num_seqs: int) -> int:
    """The decode batch a profile probes on an engine the sweep measures, which runs at most
    ``max_num_seqs`` sequences: one is left for the prompt injected beside the decoders."""
    return min(PROFILE_MAX_BATCH, max_num_seqs - 1)


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
    EngineError raised (the sweep stops with it). With ``config.engine_spec`` the engine is
    left running in ``outcome.held``."""
    outcome = run_profile(config, progress=progress, on_start=on_start)
    try:
        if outcome.json_path is not None:
            from budgettune.app.report import run_report  # plotly: only when a page is due

            run_report(outcome.json_path, output=outcome.json_path.with_suffix(".html"))
    except BaseException:
        if outcome.held is not None:
            outcome.held.close()
        raise
    return outcome


def plan(
    config: SweepConfig, schedule: Schedule
) -> tuple[Candidates, dict[int, Prediction], float]:
    """Candidates and the simulator's prediction for each (plus the engine default)."""
    q = config.quantile
    warmup = config.run.warmup_requests
    probe_budget = config.default_budget or 2048

    def predict_at(budget: int) -> Prediction:
        # The replays' traffic: open loop at the schedule's times, or --concurrency's loop.
        return predict(
            schedule,
            config.step_model,
            config.scheduler,
            budget,
            q=q,
            warmup_requests=warmup,
            concurrency=config.run.concurrency,
        )

    baseline = predict_at(probe_budget)
    context = typical_context_tokens(schedule)
    derived = budget_candidates(
        config.step_model,
        slo_tbt_s=config.slo_tbt_s,
        decode_batch=baseline.decode_batch,
        context_tokens=context,
        align=config.align_tokens,
        knee_found=config.knee_found,
    )
    if not config.budgets:  # searched: none the engine refuses beside the max-num-seqs given
        taken = budgets_taken(
            config.engine, derived.budgets, config.base_spec.max_num_seqs, config.align_tokens
        )
        derived = dataclasses.replace(derived, budgets=taken)
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
            predictions[budget] = predict_at(budget)
    return candidates, predictions, context


def run_sweep_to_end(
    config: SweepConfig,
    traffic: Traffic,
    events: SweepEvents | None = None,
    finished: Sequence[Point] = (),
    *,
    slots: Sequence[Slot] = (Slot(0),),
    executor: Executor | None = None,
) -> SweepResult:
    """:func:`run_sweep` on an event loop of its own, to its end: how a command runs a sweep
    (the display only passes its events)."""
    return asyncio.run(run_sweep(config, traffic, events, finished, slots=slots, executor=executor))


async def run_sweep(
    config: SweepConfig,
    traffic: Traffic,
    events: SweepEvents | None = None,
    finished: Sequence[Point] = (),
    *,
    slots: Sequence[Slot] = (Slot(0),),
    executor: Executor | None = None,
) -> SweepResult:
    """Plan, verify live, recommend, and write the run folder, which :func:`open_run` made
    (``finished``: the points it already holds, none of them re-run but those whose worker was
    lost). An engine that fails at one budget is recorded and skipped. ``traffic``: the
    schedule, the same requests with fresh arrivals (re-measures), and at other rates
    (``--goodput``). ``slots`` and ``executor``: where the verifications run, up to one per slot
    at a time (default: one, in this process)."""
    events = events or SweepEvents()
    executor = executor or InProcess()
    schedule = traffic.schedule
    started = time.perf_counter()
    done = {point.budget: point for point in finished if point.status is not Status.LOST}
    candidates, predictions, _ = plan(config, schedule)
    if events.on_plan:
        events.on_plan(candidates, predictions)
    round_events = RoundEvents(
        on_slot=events.on_slot,
        on_message=events.on_message,
        on_replay=events.on_replay,
        on_start=events.on_start,
        on_ready=events.on_ready,
        on_launch=events.on_launch,
    )
    rounds = await verify_in_rounds(
        config,
        traffic,
        candidates,
        predictions,
        done,
        executor=executor,
        slots=slots,
        events=round_events,
        on_point=events.on_point,
        on_round=events.on_round,
    )
    launches = rounds.launches
    points = [done[b] for b in sorted(done)]
    if config.goodput:
        points = await goodput_points(config, traffic.at_rate, points, events)
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
        concurrency=config.run.concurrency,
        expected_hit_share=config.expected_hit_share if config.base_spec.prefix_caching else None,
    )
    wall_s = time.perf_counter() - started
    document = recommendation_document(
        config,
        candidates,
        predictions,
        points,
        recommendation,
        RunFacts(launches, rounds.rounds, len(slots), executor.name, wall_s),
    )
    files = write_run_folder(config, recommendation, document, points)
    return SweepResult(
        candidates, predictions, points, recommendation, launches, wall_s, files, document
    )


def write_run_folder(
    config: SweepConfig,
    recommendation: Recommendation,
    document: Mapping[str, object],
    points: Sequence[Point],
) -> dict[str, Path]:
    """The sweep's outputs in its run folder: recommendation.json and the engine's config file,
    results.json, and the report page; the profile.json the folder holds is listed too."""
    files = write_outputs(
        config.run_dir,
        recommendation,
        document=document,
        engine=config.engine,
        served_model=config.served_model,
        # what the user set, whatever the engine: a --max-num-seqs measured on the built-in
        # engine belongs in the config as much as one measured on vLLM
        fixed=FixedSettings(
            max_num_seqs=config.base_spec.max_num_seqs,
            max_model_len=config.base_spec.max_model_len,
            tensor_parallel_size=config.base_spec.tensor_parallel_size,
            gpu_memory_utilization=config.base_spec.gpu_memory_utilization,
            dtype=config.base_spec.dtype,
            prefix_caching=prefix_caching_setting(config.engine, config.base_spec.prefix_caching),
            base_config_text=config.engine_config_text,
            engine_args=config.base_spec.extra_args,
        ),
    )
    files["results"] = save_results(sweep_results(config, document, list(points)), config.run_dir)
    if (config.run_dir / PROFILE_FILE).is_file():  # the profile step's, or an earlier run's
        files["profile"] = config.run_dir / PROFILE_FILE
    from budgettune.app.report import write_sweep_report  # plotly: only when a page is written

    files["report"] = write_sweep_report(finished_document(document, points), config.run_dir)
    return files


async def goodput_points(
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
            target = Target(handle.url, handle.model, config.base_spec.api_key, handle.metrics_path)

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
