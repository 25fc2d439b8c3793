"""From a :class:`~budgettune.app.requests.SweepRequest` to the :class:`SweepConfig` the sweep
runs: the policy of ``budgettune sweep`` in one place. Which engine (``--engine auto``), the
measure-first rule (vLLM and SGLang without a profile run the profile step first), the reference
budget (the engine's default on the GPU, detected when not named), the step-time model and the
words that say where it came from, the predictions' KV cache, the settings sweep.json records,
and ``--resume``'s restored request.

Printing is the caller's: it passes ``say`` (one line for the user) and ``profile_step`` (runs
the profile step, with whatever progress display it likes)."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgettune.app.baseline import Baseline
from budgettune.app.client import ClientSettings, client_settings, without_secrets
from budgettune.app.engine_config_file import with_engine_config
from budgettune.app.launch import (
    SEQS_AUTO,
    budget_spec,
    check_budgets_hold_seqs,
    external_budget,
    known_shape,
    launch_spec,
    max_num_seqs_values,
    resolve_engine,
    seqs_auto,
    tunes_seqs,
)
from budgettune.app.profile import probes_model_len
from budgettune.app.requests import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    SWEEP_RATE_PER_S,
    SWEEP_REQUESTS,
    LaunchRequest,
    ModelRequest,
    SweepRequest,
    TrafficRequest,
)
from budgettune.app.slots import GPU_ENGINES, Slot, SlotPlan, parse_gpus, plan_slots
from budgettune.app.sweep import (
    PROFILE_FILE,
    PROFILE_MIN_TOKENS,
    held_profile_batch,
    open_run,
    profile_config,
    saved_profile,
)
from budgettune.app.traffic import (
    Traffic,
    build_traffic,
    check_live_span,
    max_model_len_tokens,
)
from budgettune.artifacts.runfolder import pair_points_count, read_settings
from budgettune.artifacts.sweep_options import (
    OPTIONS_KEY,
    read_saved_options,
    restore_options,
    saved_options,
)
from budgettune.core.auth import hide_env
from budgettune.core.engine_defaults import DefaultBudget, default_budget_on
from budgettune.core.errors import SpecError, UserError
from budgettune.core.hardware import GPU, resolve_gpu
from budgettune.core.limits import MAX_REPLAYS, check_count
from budgettune.core.slo import check_percentile
from budgettune.core.units import parse_int_list
from budgettune.engines.base import LaunchSpec
from budgettune.engines.config_file import read_engine_config, redacted_text
from budgettune.engines.embedded.cli import calibration_flags
from budgettune.loadgen.runner import RunOptions
from budgettune.model.calibration import DEFAULT_CALIBRATION, CalibrationChoice
from budgettune.model.profile import Profile, load_profile, profile_step_model
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.plan import DEFAULT_CONTEXTS
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.trace.prefix_blocks import unbounded_hit_share
from budgettune.tune.sweep_config import ModelSourceKind, SweepConfig

if TYPE_CHECKING:
    from budgettune.app.executors import Executor
    from budgettune.app.profile import HeldEngine, ProfileConfig, ProfileOutcome
    from budgettune.tune.gpu import DetectedGPU
    from budgettune.tune.point import Point

DEFAULT_RATE_PER_S = SWEEP_RATE_PER_S  # synthetic traffic without --rate
DEFAULT_REQUESTS = SWEEP_REQUESTS  # synthetic traffic without --requests
ANALYTIC = "analytic"  # profile "analytic": the presets' roofline, no profile step
REAL_ENGINES = ("vllm", "sglang", "trtllm")
# The predictions' sequence limit where the engine sizes its running batch itself (SGLang, from
# its KV pool): the KV cache is then the limit that binds.
ENGINE_SIZED_SEQS = 4096


ONE_SLOT = SlotPlan((Slot(0),), "one slot")


@dataclass(slots=True, frozen=True)
class PreparedSweep:
    """What the sweep runs: its config, the traffic (its schedule, and at other rates for
    ``--goodput``), the budgets a resumed run folder already measured, the slots the
    verifications run in and the Ray cluster to run them on (None: this machine), and the engine
    the profile step left running for its budget's replay (:func:`executor_for` hands it on)."""

    config: SweepConfig
    traffic: Traffic
    finished: Sequence[Point]
    slots: SlotPlan = ONE_SLOT
    ray: str | None = None
    held: HeldEngine | None = None  # the profile step's engine, still running at its budget


def resumed_request(
    request: SweepRequest, given: Collection[str], flags: Mapping[str, str]
) -> SweepRequest:
    """``request`` with every option not in ``given`` (typed on the command line) taken from
    the sweep saved in ``request.resume``; the given ones must ask the same question (UserError
    naming each that differs, shown with ``flags``). A sweep saved before its options were is
    continued with the request as given."""
    assert request.resume is not None
    saved = read_saved_options(request.resume)
    if saved is None:
        return request
    if "calibration" not in saved:  # saved before calibrations were named: the seed's
        saved = {**saved, "calibration": "seed"}
    restored = restore_options(request.resume, saved, request.options(), set(given), flags)
    resumed = SweepRequest.from_options(restored)
    check_engine_config_unchanged(request.resume, resumed.launch.engine_config)
    return resumed


ENGINE_CONFIG_TEXT = "engine_config_text"


def check_engine_config_unchanged(run_dir: Path, path: Path | None) -> None:
    """A resumed sweep launches with the same engine config file as its first run: UserError
    (field ``engine_config``) when the file now reads otherwise than sweep.json recorded."""
    if path is None:
        return
    recorded = read_settings(run_dir).get(ENGINE_CONFIG_TEXT)
    if not isinstance(recorded, str):
        return  # saved before the file's text was kept
    if redacted_text(read_engine_config(path)) != recorded:
        raise UserError(
            f"{path} changed since this sweep started (its sweep.json keeps the "
            "text every launch read); restore the file, or start a new sweep",
            field="engine_config",
        )


def prepare_sweep(
    request: SweepRequest,
    *,
    command: Sequence[str],
    say: Callable[[str], None],
    warn: Callable[[str], None],
    profile_step: Callable[[ProfileConfig], ProfileOutcome],
) -> PreparedSweep:
    """Validate ``request`` and decide everything the sweep needs; opens (or, resuming, checks)
    the run folder, and runs the profile step first where the measure-first rule asks. Raises
    UserError subclasses naming the field, before any run folder exists for a mistake.

    The steps, in order: the SLOs and the load generator's options (a bad one is refused before
    anything is printed), the engine and its slots, the traffic, the engine's launch, the
    budgets, where the step-time model comes from, the run folder, then the model itself."""
    slos = _checked_slos(request)
    # every replay's schedule is built up front: a count past the limit would fill the memory
    check_count(request.max_replays, field="max_replays", maximum=MAX_REPLAYS)
    asked = request  # as typed: what --resume restores (the file's settings are read again)
    request = with_engine_config(request, tunes_seqs=tunes_seqs(request.launch))
    client = client_settings(request.client)
    target = engine_target(request)
    client = client.for_engine(target.engine, target.model)
    run_options = _run_options(request, client)
    slot_plan = sweep_slots(request, target.engine)
    run_dir = (
        request.resume
        or request.output
        or Path("reports") / _dt.datetime.now().strftime("sweep-%Y%m%d-%H%M%S")
    )
    load = sweep_traffic(request, client, warn)
    spec = sweep_launch_spec(request, target, load.request, client.api_key)
    budgets = sweep_budgets(request, target, spec, client.api_key)
    plan = model_plan(request, target, spec, budgets, slot_plan, run_dir)
    settings = _settings(
        request, slos, target.engine, load.traffic, run_dir, plan.profiling is not None,
        load.synthetic, budgets.default_budget, spec.extra_args, load.request.rate,
    )  # fmt: skip
    settings.update(client.to_json())
    settings[OPTIONS_KEY] = saved_options({**asked.options(), "engine": target.engine})
    # The run folder before any line: a folder that cannot be used is one error, nothing else.
    finished = open_run(run_dir, settings, resume=request.resume is not None)
    _say_setup(say, request, target, budgets, run_dir, finished)
    chosen = _chosen_model(plan, target.gpu_card, run_dir, say, profile_step)
    held = chosen.held
    try:
        if held is not None and held.budget_tokens in {p.budget for p in finished}:
            held.close()  # measured before an interruption: not measured again
            held = None
        say(f"step-time model: {chosen.source}")
        say(f"traffic: {load.line}")
        say(f"prompts: {client.prompts_line()}")
        config = _sweep_config(
            request, slos, target, spec, run_options, chosen, budgets, load, run_dir, settings,
            without_secrets(command),
        )  # fmt: skip
        if slot_plan.parallel > 1 or request.ray:
            say(f"slots: {slot_plan.how}" + (f"; on Ray ({request.ray})" if request.ray else ""))
    except BaseException:
        if held is not None:
            held.close()
        raise
    return PreparedSweep(config, load.traffic, finished, slot_plan, request.ray, held)


def _run_options(request: SweepRequest, client: ClientSettings) -> RunOptions:
    """The load generator's options, checked."""
    if client.concurrency is not None and request.goodput:
        raise SpecError(
            "searches the highest request rate; a closed loop (--concurrency) sends no rate",
            field="goodput",
        )
    return client.run_options(
        request_timeout=request.client.request_timeout,
        max_error_rate=request.max_error_rate,
        seed=request.traffic.seed,
        warmup=request.client.warmup,
    )


@dataclass(slots=True, frozen=True)
class SweepTraffic:
    """The traffic step: the request as run (synthetic traffic gets the default rate), its
    schedules, whether it was the synthetic default, and the line that describes it."""

    request: TrafficRequest
    traffic: Traffic
    synthetic: bool
    line: str


def sweep_traffic(
    request: SweepRequest, client: ClientSettings, warn: Callable[[str], None]
) -> SweepTraffic:
    """The schedule the sweep replays (a trace's, or synthetic), checked against --warmup."""
    asked = request.traffic
    synthetic = asked.trace is None and asked.rate is None
    if synthetic:
        asked = replace(asked, rate=DEFAULT_RATE_PER_S)
    traffic = build_traffic(asked, default_requests=DEFAULT_REQUESTS, on_warning=warn)
    check_live_span(traffic, asked)
    count = len(traffic.schedule)
    warmup = request.client.warmup
    if warmup >= count:
        raise SpecError(f"{warmup} leaves none of {count} requests", field="warmup")
    return SweepTraffic(asked, traffic, synthetic, client.describe(traffic.description))


def sweep_launch_spec(
    request: SweepRequest,
    target: EngineTarget,
    traffic: TrafficRequest,
    api_key: str | None,
) -> LaunchSpec:
    """How every budget's engine is started: the built-in engine runs the predictions' model
    (the profile given, else the presets in their calibration)."""
    launch, engine, profile = request.launch, target.engine, request.profile
    _tuned_seqs(request, engine)  # refused here, before anything starts
    if engine == "sim":
        if profile is not None and str(profile) != ANALYTIC:
            flag = shlex.join(["--profile", str(profile.resolve())])
        else:
            flag = shlex.join(calibration_flags(CalibrationChoice(request.calibration)))
        launch = replace(launch, engine_arg=(*launch.engine_arg, flag))
    return launch_spec(
        launch,
        engine=engine,
        model=target.model,
        gpu=target.gpu,
        url=request.client.url,
        max_model_len_tokens=max_model_len_tokens(traffic),
        api_key=api_key,
        several_seqs=tunes_seqs(request.launch),
    )


@dataclass(slots=True, frozen=True)
class SweepBudgets:
    """The budgets step: the baseline asked for, the engine's own defaults (None: not needed,
    or a running server), the predictions' sequence limit (None: the engine sizes it), the
    candidates named (None: the search picks them) and the reference budget."""

    baseline: Baseline
    defaults: DefaultBudget | None
    engine_seqs: int | None
    candidates: tuple[int, ...] | None
    default_budget: int | None


def sweep_budgets(
    request: SweepRequest, target: EngineTarget, spec: LaunchSpec, api_key: str | None
) -> SweepBudgets:
    """The candidates and the reference: an external server is measured at the one budget it
    runs; a launched engine at the budgets named or searched, against its default."""
    engine = target.engine
    baseline = Baseline.parse(request.baseline)
    # Asking vLLM takes 5-15 s: only when the baseline or the sequence limit needs it.
    needs_defaults = baseline.is_auto or spec.max_num_seqs is None
    defaults = (
        engine_defaults_for(engine, spec, target.gpu_card, target.detected)
        if needs_defaults
        else None
    )
    # The predictions' running-sequence limit: the user's, else the engine's own default.
    engine_seqs = spec.max_num_seqs or (defaults.max_num_seqs if defaults else None)
    if engine == "external":  # one server, one budget: the one it runs
        assert request.client.url is not None
        served = external_budget(request, baseline, request.client.url, api_key)
        return SweepBudgets(baseline, defaults, engine_seqs, (served,), None)
    named = (
        tuple(parse_int_list(request.budgets, field="budgets"))
        if request.budgets is not None
        else None
    )
    # a budget the engine refuses beside the max-num-seqs given (several: pair by pair, later)
    check_budgets_hold_seqs(engine, named or (), spec.max_num_seqs, field="budgets")
    return SweepBudgets(baseline, defaults, engine_seqs, named, baseline.budget(defaults))


@dataclass(slots=True, frozen=True)
class ModelPlan:
    """Where the predictions' step-time model comes from: the profile step to run once the run
    folder is open (``profiling``), or the model chosen now with the words that say why."""

    profiling: ProfileConfig | None
    step_model: StepModel | None = None
    source: str = ""
    kind: ModelSourceKind = ModelSourceKind.PROFILE
    knee_found: bool | None = None  # of the profile given (None: none, or measured later)


def model_plan(
    request: SweepRequest,
    target: EngineTarget,
    spec: LaunchSpec,
    budgets: SweepBudgets,
    slot_plan: SlotPlan,
    run_dir: Path,
) -> ModelPlan:
    """The measure-first rule: vLLM and SGLang without --profile are profiled first (slot 0's
    GPUs, up to the largest budget considered); otherwise the profile given or the presets."""
    engine, model, profile = target.engine, target.model, request.profile
    if profile is None and engine in REAL_ENGINES:
        assert model is not None  # engine_target checked it for the real engines
        held = _profiled_engine(request, spec, budgets, slot_plan, run_dir)
        profiling = profile_config(
            run_dir, engine=engine, model=model, gpu=target.gpu,
            max_num_seqs=budgets.engine_seqs or ENGINE_SIZED_SEQS, launch=spec,
            engine_env={**spec.env, **slot_plan.slots[0].engine_env()},  # slot 0's GPUs
            budgets=budgets.candidates, reference_budget=budgets.default_budget,
            seed=request.traffic.seed, engine_spec=held,
        )  # fmt: skip
        return ModelPlan(profiling)
    knee_found: bool | None = None  # no profile behind the roofline
    if profile is not None and str(profile) != ANALYTIC:
        loaded = load_profile(profile)
        check_profile_matches(loaded, profile, request.launch.model, request.launch.gpu)
        step_model, source, kind = (
            profile_step_model(loaded),
            f"calibrated profile {profile}",
            ModelSourceKind.PROFILE,
        )
        knee_found = _knee_found(loaded)
    else:
        card = target.gpu_card.name if target.gpu_card else None
        step_model, source, kind = analytic_model(
            profile is not None,
            model,
            card,
            engine,
            request.calibration,
            tensor_parallel=spec.tensor_parallel_size or 1,
        )
    detected = target.detected
    if detected is not None and detected.name and detected.preset is None:
        source += (
            f"; no GPU preset matches {detected.name}, so {DEFAULT_GPU}'s figures are used "
            "(--gpu names another)"
        )
    return ModelPlan(None, step_model, source, kind, knee_found)


def check_profile_matches(loaded: Profile, path: Path, model: str | None, gpu: str | None) -> None:
    """Refuse a --profile of another model or GPU than the --model and --gpu given (SpecError
    naming the option): its predictions, and on the built-in engine the replays themselves,
    would be that model's on that GPU while the run is labelled with these. A model only the
    engine can resolve (a hub id) is not compared."""
    shape = loaded.model.shape
    given = known_shape(model)
    if given is not None:
        dims = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab")
        if any(getattr(given, d) != getattr(shape, d) for d in dims):
            raise SpecError(
                f"{path} is a profile of {shape.name}, not of {given.name}; give a profile of "
                "the model the sweep runs, or drop --model",
                field="model",
            )
    preset = loaded.hardware.preset
    if gpu is not None and preset is not None and resolve_gpu(gpu).name != preset:
        raise SpecError(
            f"{path} was measured on {preset}, not on {resolve_gpu(gpu).name}; give a profile "
            "of the GPU the sweep runs on, or drop --gpu",
            field="gpu",
        )


def _profiled_engine(
    request: SweepRequest,
    spec: LaunchSpec,
    budgets: SweepBudgets,
    slot_plan: SlotPlan,
    run_dir: Path,
) -> LaunchSpec | None:
    """The engine the profile step runs on and leaves running for its budget's replay, so no
    engine is started for profiling alone: the engine default's (which the sweep measures in any
    case), started as its replay would be. None, and a start of the profile's own, where that
    engine cannot hold every probe (a budget below a candidate's or below
    PROFILE_MIN_TOKENS plus a decode batch, a shorter --max-model-len than the probes'
    contexts), where budgets run in other processes (--parallel, --ray), or where max-num-seqs
    is tuned (each replay's engine runs at one of the values, the profile's at its own)."""
    reference = budgets.default_budget
    if reference is None or slot_plan.parallel > 1 or request.ray or tunes_seqs(request.launch):
        return None
    if budgets.candidates and reference < max(budgets.candidates):
        return None
    seqs = budgets.engine_seqs or ENGINE_SIZED_SEQS
    if seqs < 2 or reference - held_profile_batch(seqs) < PROFILE_MIN_TOKENS:
        return None  # the profile's own decode batch and prompt: the batch leaves one sequence
    longest = probes_model_len(reference, DEFAULT_CONTEXTS)
    if spec.max_model_len is not None and spec.max_model_len < longest:
        return None
    return budget_spec(spec, reference, run_dir)


def _say_setup(
    say: Callable[[str], None],
    request: SweepRequest,
    target: EngineTarget,
    budgets: SweepBudgets,
    run_dir: Path,
    finished: Sequence[Point],
) -> None:
    """The lines that say what the sweep runs on, once its run folder is open."""
    baseline, defaults, detected = budgets.baseline, budgets.defaults, target.detected
    say(target.why)
    if detected is not None:
        say(f"GPU: {detected.describe()}; {baseline.line(defaults)}")
    elif defaults is not None and baseline.is_auto:
        say(baseline.line(defaults))
    if target.engine == "external" and budgets.candidates:
        told = baseline.tokens is None
        say(
            f"server budget {budgets.candidates[0]} "
            f"({'its /server_info' if told else 'as given with --baseline'}): measured as it runs"
        )
    if request.resume is not None:
        if tunes_seqs(request.launch):  # a two-knob sweep keeps its pairs by max-num-seqs value
            pairs = pair_points_count(run_dir)
            say(f"resuming {run_dir}: {pairs} pair(s) (budget with max-num-seqs) already measured")
        else:
            say(f"resuming {run_dir}: {len(finished)} budget(s) already measured")


@dataclass(slots=True, frozen=True)
class ChosenModel:
    """The predictions' step-time model, the words that say where it came from, its kind, and
    the GPU preset that sizes the predictions' KV cache (None: unknown)."""

    step_model: StepModel
    source: str
    kind: ModelSourceKind
    gpu_card: GPU | None
    knee_found: bool | None  # of the profile behind it (None: the roofline)
    held: HeldEngine | None = None  # the engine the profile step measured on, still running


def _chosen_model(
    plan: ModelPlan,
    gpu_card: GPU | None,
    run_dir: Path,
    say: Callable[[str], None],
    profile_step: Callable[[ProfileConfig], ProfileOutcome],
) -> ChosenModel:
    """The plan's model: measured now (or reused from an interrupted run) when it asks for the
    profile step, whose GPU then sizes the predictions unless one was named."""
    if plan.profiling is None:
        assert plan.step_model is not None
        return ChosenModel(plan.step_model, plan.source, plan.kind, gpu_card, plan.knee_found)
    profile, source, held = _measure_first(plan.profiling, run_dir, say, profile_step)
    try:
        card = gpu_card or _profile_gpu(profile)
        step_model = profile_step_model(profile)
    except BaseException:
        if held is not None:
            held.close()
        raise
    return ChosenModel(step_model, source, plan.kind, card, _knee_found(profile), held)


def _sweep_config(
    request: SweepRequest,
    slos: tuple[float, float],
    target: EngineTarget,
    spec: LaunchSpec,
    run_options: RunOptions,
    chosen: ChosenModel,
    budgets: SweepBudgets,
    load: SweepTraffic,
    run_dir: Path,
    settings: Mapping[str, object],
    command: tuple[str, ...],
) -> SweepConfig:
    """The steps' outcomes as the one config the sweep runs."""
    engine, gpu_card, detected = target.engine, chosen.gpu_card, target.detected
    schedule = load.traffic.schedule
    mixed = "--enable-mixed-chunk" in spec.extra_args
    return SweepConfig(
        slo_tbt_s=slos[0],
        slo_ttft_s=slos[1],
        percentile=request.slo.percentile,
        engine=engine,
        base_spec=spec,
        run=run_options,
        step_model=chosen.step_model,
        model_source=chosen.source,
        model_source_kind=chosen.kind,
        knee_found=chosen.knee_found,
        scheduler=predictions_scheduler(
            chosen.step_model,
            gpu_card,
            budgets.engine_seqs or ENGINE_SIZED_SEQS,
            request.launch.tensor_parallel_size or 1,
            decodes_beside_prefill=engine != "sglang" or mixed,
            prefix_caching=spec.prefix_caching,
            prefix_cached_after_iteration=engine == "sglang",
        ),
        expected_hit_share=unbounded_hit_share(
            schedule.prompt_tokens,
            schedule.prefix_group,
            schedule.prefix_tokens,
            shared=schedule.shared_blocks,
        ),
        traffic=load.line,
        rate_per_s=schedule.rate_per_s,
        asked_rate_per_s=load.request.rate,
        requests=len(schedule),
        run_dir=run_dir,
        budgets=budgets.candidates,
        align_tokens=request.align,
        default_budget=budgets.default_budget,
        engine_defaults=budgets.defaults,
        baseline_label=budgets.baseline.label,
        goodput=request.goodput,
        exhaustive=request.exhaustive,
        max_replays=request.max_replays,
        resume=request.resume is not None,
        settings=settings,
        engine_config_text=(
            str(settings[ENGINE_CONFIG_TEXT]) if ENGINE_CONFIG_TEXT in settings else None
        ),
        command=command,
        max_num_seqs_values=_tuned_seqs(request, engine),
        max_num_seqs_auto=seqs_auto(request.launch),
        hardware={
            "gpu": gpu_card.name if gpu_card else None,
            **({"gpu_detected": detected.describe()} if detected else {}),
            "model": target.model,
        },
        served_model=target.model if engine in REAL_ENGINES else None,
    )


def executor_for(prepared: PreparedSweep) -> Executor:
    """Where the prepared sweep's verifications run: Ray with ``--ray``, a process per slot with
    several slots, else this process. Raises UserError when Ray is asked for and missing."""
    from budgettune.app.executors import InProcess, LocalProcesses

    if prepared.ray:
        from budgettune.app.executor_ray import RayExecutor

        tensor_parallel = prepared.config.base_spec.tensor_parallel_size or 1
        gpus = float(tensor_parallel) if prepared.config.engine in GPU_ENGINES else 0.0
        return RayExecutor(prepared.ray, gpus_per_task=gpus)
    if prepared.slots.parallel > 1:
        return LocalProcesses()
    return InProcess(prepared.held)


def sweep_slots(request: SweepRequest, engine: str) -> SlotPlan:
    """The slots of ``request`` for ``engine``: GPU sets of nvidia-smi's GPUs (or ``--gpus``)
    on vLLM and SGLang, processes on the built-in engine; on Ray, ``--parallel`` tasks that each
    ask Ray for their GPUs. Raises SpecError naming the field."""
    if request.goodput and (request.parallel or 1) > 1:
        raise SpecError("runs one budget at a time; use --parallel 1", field="goodput")
    gpus = parse_gpus(request.gpus)
    tensor_parallel = request.launch.tensor_parallel_size or 1
    if request.ray:
        if engine == "external":
            raise SpecError("a server you run is not started on Ray", field="ray")
        if gpus is not None:
            raise SpecError("Ray chooses each task's GPUs; leave --gpus out", field="gpus")
        count = request.parallel or 1
        return SlotPlan(tuple(Slot(i) for i in range(count)), f"{count} Ray task(s) at once")
    visible: list[int] = []
    if engine in GPU_ENGINES:
        from budgettune.model.profile import query_gpus

        visible = [int(row[0]) for row in query_gpus("index") if row[0].isdigit()]
    return plan_slots(
        engine,
        parallel=request.parallel,
        gpus=gpus,
        tensor_parallel=tensor_parallel,
        visible_gpus=visible,
    )


def _checked_slos(request: SweepRequest) -> tuple[float, float]:
    """The SLOs in seconds (TBT, TTFT), after checking the request's own values: the TBT
    target given, the percentile, the alignment, one run folder."""
    resume = request.resume
    slo = request.slo
    if slo.slo_tbt is None:
        raise SpecError(
            "required (the p99 time-between-tokens target, e.g. 50ms)",
            field="slo_tbt",
            hint=None if resume is None else f"{resume} saved no options; give them again",
        )
    slo_tbt_s, slo_ttft_s = slo.targets_s()
    if slo_tbt_s is None or slo_ttft_s is None:
        raise SpecError("required (the TTFT target, e.g. 1s)", field="slo_ttft")
    check_percentile(slo.percentile)
    if request.align <= 0 or request.align % 16:
        raise SpecError(
            f"must be a positive multiple of the KV block size 16, got {request.align}",
            field="align",
        )
    if request.output is not None and resume is not None and request.output != resume:
        raise SpecError("names another folder than --output; give one of them", field="resume")
    return slo_tbt_s, slo_ttft_s


@dataclass(slots=True, frozen=True)
class EngineTarget:
    """What the sweep runs on: the engine (``auto`` resolved) and why, the model and the GPU
    named (the sim engine's defaults filled in), the card nvidia-smi shows when a real engine
    names none, and the GPU preset that sizes the predictions (None: unknown)."""

    engine: str
    why: str
    model: str | None
    gpu: str | None
    detected: DetectedGPU | None
    gpu_card: GPU | None


def engine_target(request: SweepRequest) -> EngineTarget:
    """The engine policy: ``auto`` is vLLM with a GPU and vLLM, else sim; external needs a URL,
    vLLM and SGLang a model; the sim engine defaults to the preset model on the preset GPU; a
    real engine without a named GPU detects the card. Raises SpecError naming the field."""
    url, resume = request.client.url, request.resume
    engine, why = resolve_engine(request.launch.engine, url, request.launch.engine_cmd)
    if resume is not None and engine != "external":
        why = f"engine {engine} (as the sweep in {resume} ran)"
    if engine == "external" and url is None:
        raise SpecError("the external engine needs the server's URL", field="url")
    model, gpu = request.launch.model, request.launch.gpu
    if engine == "sim":
        model, gpu = model or DEFAULT_MODEL, gpu or DEFAULT_GPU
    if engine in REAL_ENGINES and not model:
        raise SpecError(f"the {engine} engine needs a model (a folder or an id)", field="model")
    detected = None
    if engine in REAL_ENGINES and gpu is None:
        from budgettune.tune.gpu import detect_gpu

        detected = detect_gpu()  # for the engine's default budget and the step-time model
    gpu_card = resolve_gpu(gpu) if gpu else detected.preset if detected else None
    return EngineTarget(engine, why, model, gpu, detected, gpu_card)


def _settings(
    request: SweepRequest,
    slos: tuple[float, float],
    engine: str,
    traffic: Traffic,
    run_dir: Path,
    measure_first: bool,
    synthetic: bool,
    default_budget: int | None,
    engine_args: tuple[str, ...],
    rate: float | None,
) -> dict[str, Any]:
    """sweep.json's settings (a JSON document): what the sweep asked, the request itself for
    ``--resume`` (with the engine ``auto`` chose), and provenance recorded now."""
    launch, traffic_request, profile = request.launch, request.traffic, request.profile
    trace = traffic_request.trace
    settings = {
        "slo_tbt_s": slos[0], "slo_ttft_s": slos[1],
        "percentile": request.slo.percentile, "engine": engine, "traffic": traffic.description,
        "model": launch.model if engine != "sim" else launch.model or DEFAULT_MODEL,
        "gpu": launch.gpu if engine != "sim" else launch.gpu or DEFAULT_GPU,
        "profile": str(run_dir / PROFILE_FILE) if measure_first else profile and str(profile),
        "budgets": request.budgets, "align": request.align,
        "max_num_seqs": _seqs_setting(launch), "engine_cmd": launch.engine_cmd,
        "engine_args": list(engine_args), "env": hide_env(launch.env), "dtype": launch.dtype,
        "prefix_caching": launch.prefix_caching, "trace": str(trace) if trace else None,
        "rate": rate, "synthetic": synthetic, "requests": len(traffic.schedule),
        "warmup": request.client.warmup, "seed": traffic_request.seed, "goodput": request.goodput,
        "exhaustive": request.exhaustive, "baseline": default_budget,
        "max_replays": request.max_replays, "parallel": request.parallel, "gpus": request.gpus,
        "ray": request.ray,
    }  # fmt: skip
    settings[OPTIONS_KEY] = saved_options({**request.options(), "engine": engine})
    if launch.engine_config is not None:  # what every launch read, for --resume to check
        settings[ENGINE_CONFIG_TEXT] = redacted_text(read_engine_config(launch.engine_config))
    settings["python_version"] = platform.python_version()
    if trace is not None and traffic.report is not None:
        settings["trace_sha256"] = traffic.report.sha256
    return settings


def engine_defaults_for(
    engine: str, spec: LaunchSpec, gpu_card: GPU | None, detected: DetectedGPU | None
) -> DefaultBudget | None:
    """The budget and sequence limit ``engine`` picks when given neither: vLLM asked in its own
    interpreter, else the table's on the detected GPU (or the named one); None for a running
    server (``external``: its budget is whatever it was started with)."""
    if engine == "external":
        return None
    if engine == "sim":
        return default_budget_on(engine, gpu_card)
    from budgettune.engines.defaults_probe import engine_defaults
    from budgettune.engines.vllm import DEFAULT_COMMAND

    if detected is not None:  # nvidia-smi's card (no --gpu); none seen: a CPU build
        name, memory = detected.name, detected.memory_bytes
    elif gpu_card is not None:
        name, memory = gpu_card.name, gpu_card.memory_bytes
    else:
        name, memory = None, None
    command = spec.engine_cmd or (DEFAULT_COMMAND if engine == "vllm" else None)
    return engine_defaults(
        engine,
        command,
        spec.env,
        gpu_name=name,
        memory_bytes=memory,
        tensor_parallel=spec.tensor_parallel_size or 1,
    )


def analytic_model(
    asked_analytic: bool,
    model: str | None,
    gpu: str | None,
    engine: str,
    calibration: str = DEFAULT_CALIBRATION,
    *,
    tensor_parallel: int = 1,
) -> tuple[StepModel, str, ModelSourceKind]:
    """The predictions' analytic roofline in ``calibration`` on ``tensor_parallel`` GPUs, with a
    line saying why it is the model (``asked_analytic``: ``--profile analytic``), and its
    kind."""
    from budgettune.app.step_model import calibration_of, step_model_of

    analytic = ModelSourceKind.ANALYTIC
    shape_source = model or DEFAULT_MODEL
    card = gpu or DEFAULT_GPU
    asked = ModelRequest(
        model=shape_source,
        gpu=card,
        tensor_parallel=tensor_parallel,
        calibration=CalibrationChoice(calibration),
    )
    step_model = step_model_of(asked)
    calibrated = calibration_of(asked)
    split = f" x {tensor_parallel}" if tensor_parallel > 1 else ""
    roofline = f"analytic roofline of {shape_source} on {card}{split}"
    where = f"; calibration {calibrated.name}: {calibrated.source}"
    if asked_analytic:
        return (
            step_model,
            f"{roofline} (--profile analytic: presets, not measured){where}",
            analytic,
        )
    if engine == "sim":
        return (
            step_model,
            (
                f"{roofline} (the analytic profile: the sim engine runs the same presets; "
                f"`budgettune profile` calibrates one for real hardware){where}"
            ),
            analytic,
        )
    return (
        step_model,
        (
            f"{roofline}: predictions are analytic (presets, not measured); a server you run "
            "cannot be profiled without launching one, so run `budgettune profile --engine vllm` "
            f"where it runs and pass --profile FILE{where}"
        ),
        analytic,
    )


def _measure_first(
    config: ProfileConfig,
    run_dir: Path,
    say: Callable[[str], None],
    profile_step: Callable[[ProfileConfig], ProfileOutcome],
) -> tuple[Profile, str, HeldEngine | None]:
    """Without a profile on a real engine: the profile this run folder already holds (a
    resumed sweep), else the profile step run now, saying so and where; the words that name it
    as the predictions' source; and the engine it ran on when it is left running for its
    budget's replay."""
    assert config.output is not None
    source = f"calibrated profile {config.output} (measured first)"
    saved = saved_profile(run_dir)
    if saved is not None:
        say(f"profile: reusing {config.output}, measured by this sweep before it was interrupted")
        return saved, source, None
    spec = config.engine_spec
    on = (
        ""
        if spec is None
        else f", on the engine started for budget {spec.budget_tokens}, whose replay follows on it"
    )
    say(
        f"no --profile: profiling {config.engine} first (prompts to {config.max_tokens} tokens, "
        f"decode batches to {config.max_batch}) into {config.output}{on}; --profile analytic "
        "skips this"
    )
    outcome = profile_step(config)
    measured = outcome.profile
    ridge = measured.ridge.reason if measured.ridge is not None else "no ridge"
    say(
        f"profile: {len(measured.probes)} probes in {measured.elapsed_s or 0:.0f} s, saved "
        f"{outcome.json_path} (curve {outcome.csv_path}, report "
        f"{config.output.with_suffix('.html')}); {ridge}"
    )
    return measured, source, outcome.held


def _knee_found(profile: Profile) -> bool | None:
    """Whether the profile found a knee (None: it fitted no ridge)."""
    return None if profile.ridge is None else profile.ridge.knee_found


def _profile_gpu(profile: Profile) -> GPU | None:
    """The GPU preset a measured profile names (sizes the predictions' KV cache), if any."""
    preset = profile.hardware.preset
    return resolve_gpu(preset) if preset else None


def predictions_scheduler(
    step_model: StepModel,
    gpu_card: GPU | None,
    max_num_seqs: int,
    tensor_parallel: int,
    *,
    decodes_beside_prefill: bool = True,
    prefix_caching: bool = False,
    prefix_cached_after_iteration: bool = False,
) -> SchedulerConfig:
    """The scheduler the predictions simulate: the KV cache the GPU holds for the model
    (``DEFAULT_GPU``'s when none is known), and the engine's policy: decodes beside prompt
    chunks (vLLM; SGLang with ``--enable-mixed-chunk``), or apart from them (SGLang's default),
    and a prefix cache when the launched engine keeps one (vLLM's rules; on SGLang what an
    iteration computes is matched from the next one). The budget is set per candidate."""
    blocks = kv_capacity_blocks(
        step_model, gpu_card or resolve_gpu(DEFAULT_GPU), tensor_parallel=tensor_parallel
    )
    return SchedulerConfig(
        budget_tokens=None,
        kv_capacity_blocks=blocks,
        max_num_seqs=max_num_seqs,
        decodes_beside_prefill=decodes_beside_prefill,
        prefix_caching=prefix_caching,
        prefix_cached_after_iteration=prefix_cached_after_iteration,
    )


def _seqs_setting(launch: LaunchRequest) -> int | list[int] | str | None:
    """--max-num-seqs as sweep.json's settings record it: the number (as before several could
    be given), the values when several are tuned, "auto", None when not given."""
    if seqs_auto(launch):
        return SEQS_AUTO
    values = max_num_seqs_values(launch)
    if len(values) > 1:
        return list(values)
    return values[0] if values else None


def _tuned_seqs(request: SweepRequest, engine: str) -> tuple[int, ...]:
    """The --max-num-seqs values tuned with the budget (empty: one value or none, not tuned, or
    ``auto``: the sweep picks them from its plan). Raises SpecError for an external server,
    whose max-num-seqs budgettune cannot set."""
    values = max_num_seqs_values(request.launch)
    if len(values) < 2 and not seqs_auto(request.launch):
        return ()
    if engine == "external":
        raise SpecError(
            f"a server you run has one max-num-seqs (--max-num-seqs {request.launch.max_num_seqs})",
            field="engine",
        )
    return values
