"""`budgettune profile`: validate, pick the measurement path, run the probes, fit the ridge and
the step-time model, save the profile (partial ones too) and derive the budget floor and the
budgets that reach common TBT targets.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from budgettune import __version__
from budgettune.app.profile_fit import IMPORT_ENGINE, fit_profile, imported_profile, shape_constants
from budgettune.app.requests import (
    PROFILE_MAX_BATCH,
    PROFILE_MAX_TOKENS,
    ProfileRequest,
)
from budgettune.core.errors import EngineError, SpecError
from budgettune.core.hardware import GPU, ModelShape, dtype_bytes, resolve_gpu, resolve_model
from budgettune.core.limits import MAX_GPUS, MAX_SEQS, check_count, check_tokens
from budgettune.core.units import parse_duration_s, parse_int_list, parse_tokens
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback
from budgettune.model.calibration import CalibrationChoice
from budgettune.model.profile import (
    MEASURED_LABEL,
    Hardware,
    ModelInfo,
    Probe,
    Profile,
    profile_step_model,
    save_profile,
)
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.budget import probe_cost_s
from budgettune.profiling.plan import (
    DEFAULT_CONTEXTS,
    IterationTimer,
    ProbeRun,
    ProbeSpec,
    ProfilePlan,
    ProgressFn,
    make_plan,
    run_probes,
)
from budgettune.tune.candidates import iteration_with_batch_s, round_up

ENGINES = ("vllm", "sglang", "trtllm", "sim", "torch", "analytic", "aiconfigurator")
LAUNCH_HEADROOM_TOKENS = 1024  # max-model-len beyond the largest probe: decoders' outputs
SIM_DEFAULT_GPU = "h100-sxm"
SIM_HEALTH_TIMEOUT_S = 120.0
KV_PLAN_SHARE = 0.6
REAL_HEALTH_TIMEOUT_S = 1200.0
TBT_TARGETS_S = (0.025, 0.05, 0.1)
BUDGET_ALIGN = 256
MAX_BUDGET_TOKENS = 65536
MIN_MAX_TOKENS = 64


@dataclass(slots=True, frozen=True)
class ProfileConfig:
    """Everything `budgettune profile` was asked for (plain values, validated by run_profile)."""

    model: str
    engine: str
    gpu_name: str = "auto"
    max_tokens: int = PROFILE_MAX_TOKENS
    repeats: int = 5
    output: Path | None = None
    max_batch: int = PROFILE_MAX_BATCH
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    dtype: str = "auto"
    device: str = "auto"
    threads: int | None = None
    seed: int = 0
    probe_timeout_s: float | None = 300.0
    typical_batch: int = 64
    typical_context: int = 1024
    bootstrap: int = 200
    refine_knee: bool = True
    # analytic, and the sim engine's configuration: a calibration and the figures given
    calibration: CalibrationChoice = field(default_factory=CalibrationChoice)
    tensor_parallel: int = 1
    from_csv: Path | None = None  # engine "import": iteration times measured elsewhere
    # Seconds of probing; the probes after the prefill series that would end past it are
    # skipped, cheapest first kept. AUTO: CPU_TIME_BUDGET_S where the engine sees no GPU (a CPU
    # build), else none; None: the whole grid.
    time_budget_s: float | str | None = "auto"
    # engine path (vllm, sglang, trtllm, sim)
    engine_args: tuple[str, ...] = ()
    engine_cmd: tuple[str, ...] | None = None
    engine_env: dict[str, str] = field(default_factory=dict)
    health_timeout_s: float | None = None  # None: 20 minutes for vllm/sglang, 2 for sim
    log_path: Path | None = None
    gpu_memory_utilization: float | None = None  # None: the engine's default
    api_key: str | None = field(default=None, repr=False)  # the engine's; never recorded
    # A sweep's profile step on the engine it measures anyway: started with this spec (its
    # budget holds every probe) instead of one of the profile's own, and kept running after the
    # probes (ProfileOutcome.held) for that budget's replay.
    engine_spec: LaunchSpec | None = None
    engine_config: Path | None = None  # the user's own engine config, passed to the launch


@dataclass(slots=True, frozen=True)
class BudgetSummary:
    """What the profile implies for the budget, with ``typical_batch`` decodes beside a chunk.

    floor_tokens: smallest multiple of 256 at or above P* + typical_batch (None without a knee).
    tbt_budgets: (target_s, largest multiple of 256 whose iteration fits the target, or None).
    """

    knee_tokens: float | None
    floor_tokens: int | None
    floor_reason: str
    typical_batch: int
    typical_context: int
    tbt_budgets: tuple[tuple[float, int | None], ...]
    model_ridge_tokens: float


class HeldEngine:
    """The engine a profile measured on, left running for a replay at the same budget (its
    ``handle``); :meth:`close` stops it (once; later calls do nothing)."""

    def __init__(self, timer: IterationTimer, budget_tokens: int) -> None:
        self._timer = timer
        self.handle: EngineHandle = timer.handle  # type: ignore[attr-defined]
        self.budget_tokens = budget_tokens
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            close = getattr(self._timer, "close", None)
            if close is not None:
                close()


@dataclass(slots=True, frozen=True)
class ProfileOutcome:
    profile: Profile
    summary: BudgetSummary | None
    json_path: Path | None
    csv_path: Path | None
    held: HeldEngine | None = None  # the engine, still running (ProfileConfig.engine_spec)


def profile_config_of(request: ProfileRequest) -> ProfileConfig:
    """The profile's config from the request's text ("8K" tokens, "300s"), each value checked
    on its field; :func:`validate` then checks it against the model. The profiles to compare
    are read first, so a bad one is refused before minutes of measuring."""
    from budgettune.app.launch import parse_env, split_words
    from budgettune.model.profile import load_profile

    for path in request.compare:
        load_profile(path, field="compare")
    engine = (request.engine or "").strip().lower()
    if request.from_csv is not None:
        if engine:
            raise SpecError(
                "reads iteration times measured elsewhere; --engine measures them: give one",
                field="from_csv",
            )
        engine = IMPORT_ENGINE
    elif not engine:
        raise SpecError(
            f"say how to measure ({', '.join(ENGINES)}), or give --from FILE.csv",
            field="engine",
        )
    config = ProfileConfig(
        model=request.model,
        engine=engine,
        gpu_name=request.gpu_name,
        max_tokens=parse_tokens(request.max_tokens, field="max_tokens"),
        repeats=request.repeats,
        output=request.output,
        max_batch=request.max_batch,
        contexts=tuple(parse_int_list(request.contexts, field="contexts")),
        dtype=request.dtype,
        device=request.device,
        threads=request.threads,
        seed=request.seed,
        probe_timeout_s=parse_duration_s(request.probe_timeout, field="probe_timeout"),
        typical_batch=request.typical_batch,
        typical_context=request.typical_context,
        calibration=request.calibration,
        tensor_parallel=request.tensor_parallel,
        from_csv=request.from_csv,
        engine_args=tuple(
            arg for item in request.engine_arg for arg in split_words(item, field="engine_arg")
        ),
        engine_cmd=(
            tuple(split_words(request.engine_cmd, field="engine_cmd"))
            if request.engine_cmd
            else None
        ),
        engine_env=parse_env(request.env),
        health_timeout_s=(
            parse_duration_s(request.health_timeout, field="health_timeout")
            if request.health_timeout
            else None
        ),
        api_key=(request.api_key or "").strip() or None,
        time_budget_s=parse_time_budget(request.time_budget),
    )
    if request.engine_config is None:
        return config
    from budgettune.app.engine_config_file import profile_engine_config

    if engine not in ("vllm", "sglang", "sim"):
        raise SpecError(
            f"is read by the engines a profile launches (vllm, sglang, sim), not by {engine}",
            field="engine_config",
        )
    found = profile_engine_config(
        request.engine_config, engine, model=request.model, dtype=request.dtype,
        tensor_parallel=request.tensor_parallel,
    )  # fmt: skip
    return dataclasses.replace(
        config,
        engine_config=found.path,
        dtype=found.dtype or config.dtype,
        tensor_parallel=found.tensor_parallel_size or config.tensor_parallel,
        gpu_memory_utilization=found.gpu_memory_utilization,
    )


def parse_time_budget(text: str) -> float | str | None:
    """``--time-budget``: "auto" (kept as the word; see :func:`time_budget`), "none" (None) or
    a duration in seconds. Raises SpecError (field time_budget)."""
    word = text.strip().lower()
    if word in ("auto", "none"):
        return None if word == "none" else "auto"
    return parse_duration_s(text, field="time_budget")


def validate(config: ProfileConfig) -> ModelShape:
    """Check the config against the model; returns its shape. Raises SpecError naming the
    config's field."""
    if config.engine not in (*ENGINES, IMPORT_ENGINE):
        raise SpecError(
            f"unknown engine {config.engine!r}; known: {', '.join(ENGINES)}", field="engine"
        )
    shape = resolve_model(config.model)
    if config.max_tokens < MIN_MAX_TOKENS:
        raise SpecError(
            f"must be at least {MIN_MAX_TOKENS}, got {config.max_tokens}", field="max_tokens"
        )
    limit = shape.max_position_embeddings
    if limit is not None and config.max_tokens > limit:
        raise SpecError(
            f"{config.max_tokens} exceeds the model's max length {limit} (max_position_embeddings)",
            field="max_tokens",
            hint=f"probe at most {limit} tokens, the longest prompt the model takes",
        )
    for field_name, value, low in (
        ("repeats", config.repeats, 1),
        ("max_batch", config.max_batch, 1),
        ("typical_batch", config.typical_batch, 0),
        ("tensor_parallel", config.tensor_parallel, 1),
    ):
        if value < low:
            raise SpecError(f"must be at least {low}, got {value}", field=field_name)
    # a bad calibration name or figure fails here, before anything runs
    config.calibration.resolve(_calibrated_gpu_name(config.gpu_name))
    _check_sizes(config)
    if config.output is not None and not config.output.is_dir():
        from budgettune.core.files import check_overwrite, json_document_ours

        check_overwrite(config.output, json_document_ours, field="output")  # before measuring
    return shape


MAX_REPEATS = 1000
MAX_PROFILE_BATCH = 1 << 14  # decode batches probed: 16,384 sequences
DEVICES = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")


def _check_sizes(config: ProfileConfig) -> None:
    """Every count and size of the probes within budgettune's limits (stated in --help and the
    README), so no bad input costs minutes or memory before it is refused."""
    check_count(config.repeats, field="repeats", maximum=MAX_REPEATS)
    check_count(config.max_batch, field="max_batch", maximum=MAX_PROFILE_BATCH)
    check_count(config.typical_batch, field="typical_batch", minimum=0, maximum=MAX_SEQS)
    check_tokens(config.typical_context, field="typical_context", minimum=0)
    check_count(config.tensor_parallel, field="tensor_parallel", maximum=MAX_GPUS)
    check_count(config.seed, field="seed", minimum=0, maximum=2**64 - 1)
    if config.threads is not None:
        check_count(config.threads, field="threads", maximum=4096)
    if not DEVICES.match(config.device.strip().lower()):
        raise SpecError(f"use auto, cpu or cuda[:N], got {config.device!r}", field="device")


def _calibrated_gpu_name(name: str) -> str:
    """The GPU preset whose calibration a check or the sim engine uses ("auto": the sim's)."""
    return SIM_DEFAULT_GPU if name.strip().lower() == "auto" else name


def default_output(profile: Profile) -> Path:
    """profiles/<model>_<gpu>.json (analytic), else profiles/<model>_<hardware>_<engine>.json."""
    model = _slug(profile.model.shape.name)
    hardware = profile.hardware.preset or (
        "cpu" if profile.hardware.kind == "cpu" else _slug(profile.hardware.name)
    )
    if profile.hardware.count > 1:
        hardware += f"-tp{profile.hardware.count}"
    if profile.kind == "analytic":
        return Path("profiles") / f"{model}_{hardware}.json"
    return Path("profiles") / f"{model}_{hardware}_{profile.engine.name}.json"


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", Path(text).name.lower()).strip("-") or "model"


def run_profile(
    config: ProfileConfig,
    *,
    progress: ProgressFn | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    timer_factory: Callable[[ProfileConfig, ModelShape], IterationTimer] | None = None,
    on_start: ProgressCallback | None = None,
) -> ProfileOutcome:
    """Measure (or, for analytic, compute) and fit one profile, save it and summarise it.

    ``on_start`` sees a launched engine's start (elapsed time, the log's last line).
    A probe failing midway still saves what was measured, then raises EngineError naming the
    saved file. Raises SpecError / UserError for bad input before anything runs.
    """
    shape = validate(config)
    created = now().strftime("%Y-%m-%dT%H:%M:%SZ")
    held: HeldEngine | None = None
    if config.engine == "analytic":
        profile = _analytic(config, shape, created)
    elif config.engine == IMPORT_ENGINE:
        profile = _imported(config, shape, created)
    else:

        def default_factory(config: ProfileConfig, shape: ModelShape) -> IterationTimer:
            return build_timer(config, shape, on_start=on_start)

        profile, held = _measured(
            config, shape, created, progress, timer_factory or default_factory
        )
    try:
        path = config.output or default_output(profile)
        if path.is_dir():  # -o DIR: the default file name inside it
            path = path / default_output(profile).name
        csv_path = save_profile(profile, path)
        if not profile.complete:
            raise EngineError(
                f"profile stopped early: {profile.error}; partial measurements "
                f"({len(profile.probes)} probes) saved to {path}"
            )
        summary = summarize(profile, config.typical_batch, config.typical_context)
    except BaseException:
        if held is not None:
            held.close()
        raise
    return ProfileOutcome(profile, summary, path, csv_path, held)


def _plan(
    config: ProfileConfig, shape: ModelShape, *, kv_token_budget: int | None = None
) -> ProfilePlan:
    # A decode at context L needs L + 1 positions: keep contexts inside the model's length.
    longest = (shape.max_position_embeddings or config.max_tokens + 1) - 1
    plan = make_plan(
        max_tokens=config.max_tokens,
        max_batch=config.max_batch,
        contexts=[min(c, longest) for c in config.contexts],
        repeats=config.repeats,
        mixed_context=min(config.typical_context, longest),
        kv_token_budget=kv_token_budget,
    )
    return ProfilePlan(plan.probes, plan.repeats, refine_knee=config.refine_knee)


def _analytic(config: ProfileConfig, shape: ModelShape, created: str) -> Profile:
    from budgettune.profiling.analytic import analytic_profile  # scipy: only when profiling

    gpu = _preset_gpu(config.gpu_name)
    dtype = "bfloat16" if config.dtype == "auto" else config.dtype
    weight_bytes = dtype_bytes(dtype)
    calibration = config.calibration.resolve(gpu.name)
    model = StepModel.from_hardware(
        shape,
        gpu,
        calibration=calibration,
        bytes_per_weight=weight_bytes,
        tensor_parallel=config.tensor_parallel,
    )
    return analytic_profile(
        model_info=ModelInfo(config.model, shape, dtype, weight_bytes, weight_bytes),
        gpu=gpu,
        model=model,
        tensor_parallel=config.tensor_parallel,
        plan=_plan(config, shape),
        created_utc=created,
        budgettune_version=__version__,
        settings={
            "calibration": calibration.name,
            "calibration_source": calibration.source,
            "accounting": calibration.accounting,
            "compute_efficiency": calibration.compute_efficiency,
            "bandwidth_efficiency": calibration.weight_bandwidth_efficiency,
            "kv_bandwidth_efficiency": calibration.kv_bandwidth_efficiency,
            "sharpness": calibration.sharpness if math.isfinite(calibration.sharpness) else None,
            "overhead_s": calibration.overhead_s,
            "overhead_per_seq_s": calibration.overhead_per_seq_s,
            "mode": calibration.mode,
            "layer_floor_s": calibration.layer_floor_s,
            "prefill_layer_floor_s": calibration.prefill_layer_floor_s,
            "tensor_parallel": config.tensor_parallel,
            **_allreduce_settings(gpu, config.tensor_parallel),
        },
        calibration=calibration.name,
    )


def _allreduce_settings(gpu: GPU, tensor_parallel: int) -> dict[str, object]:
    """The all-reduce figures an analytic profile over several GPUs was built with."""
    from budgettune.model.allreduce import allreduce_for

    allreduce = allreduce_for(gpu, tensor_parallel)
    return {} if allreduce is None else {"allreduce": allreduce.to_json()}


def _preset_gpu(name: str) -> GPU:
    if name.strip().lower() == "auto":
        from budgettune.model.profile import detect_hardware

        hardware = detect_hardware("auto")
        if hardware.preset is None:
            raise SpecError(
                f"'auto' found no GPU preset on this machine ({hardware.name}); "
                "a profile from presets or a database needs one",
                field="gpu_name",
                hint="name a GPU preset, e.g. h100-sxm",
            )
        return resolve_gpu(hardware.preset)
    try:
        return resolve_gpu(name)
    except SpecError as error:  # a preset named by the config's gpu_name
        raise SpecError(error.message, field="gpu_name", hint=error.hint) from None


def build_timer(
    config: ProfileConfig, shape: ModelShape, *, on_start: ProgressCallback | None = None
) -> IterationTimer:
    """The measurement path for ``config.engine`` (torch here; engines through their API;
    AIConfigurator's database estimates)."""
    if config.engine == "aiconfigurator":
        from budgettune.profiling.aiconfigurator import AicTimer

        gpu = _preset_gpu(config.gpu_name)
        timer = AicTimer(config.model, gpu.name, tensor_parallel=config.tensor_parallel)
        # Only probes whose KV cache fits beside the weights, as on the real GPU.
        timer.kv_capacity_tokens = _sim_kv_capacity_tokens(
            config, shape, gpu.name, config.tensor_parallel
        )
        return timer
    if config.engine == "torch":
        from budgettune.profiling.torch_measure import TorchTimer

        return TorchTimer(
            config.model,
            shape,
            device=config.device,
            dtype=config.dtype,
            seed=config.seed,
            gpu_name=config.gpu_name,
            threads=config.threads,
        )
    return _engine_timer(config, shape, on_start)


def probes_model_len(max_tokens: int, contexts: Sequence[int]) -> int:
    """The context length a profile's engine needs: its longest prompt or decode context, and
    room for the decoders' outputs beyond it."""
    return max(max_tokens, *contexts) + LAUNCH_HEADROOM_TOKENS


def engine_launch_spec(config: ProfileConfig, shape: ModelShape) -> LaunchSpec:
    """One engine for the whole profile: a budget that holds the largest probe in one iteration
    (prompt plus decodes), room for every probe's sequences, prefix caching off."""
    limit = shape.max_position_embeddings
    longest = probes_model_len(config.max_tokens, config.contexts)
    sim = config.engine == "sim"
    extra = list(config.engine_args)
    if sim:
        from budgettune.engines.embedded.cli import calibration_flags

        # The sim engine is configured with the same calibration an analytic profile uses.
        extra = [*calibration_flags(config.calibration), *extra]
        if config.dtype != "auto":
            extra += ["--dtype", config.dtype]
    health = config.health_timeout_s or (SIM_HEALTH_TIMEOUT_S if sim else REAL_HEALTH_TIMEOUT_S)
    return LaunchSpec(
        budget_tokens=round_up(config.max_tokens + config.max_batch, BUDGET_ALIGN),
        max_num_seqs=config.max_batch + 1,  # the decoders and one injected prompt
        model=config.model,
        gpu=_sim_gpu(config.gpu_name) if sim else None,
        # the built-in engine sizes itself unless told; a user's file could tell it less
        max_model_len=(
            None
            if sim and config.engine_config is None
            else (min(limit, longest) if limit else longest)
        ),
        extra_args=tuple(extra),
        env=dict(config.engine_env),
        engine_cmd=config.engine_cmd,
        log_path=config.log_path,
        health_timeout_s=health,
        dtype=None if sim or config.dtype == "auto" else config.dtype,
        tensor_parallel_size=config.tensor_parallel if config.tensor_parallel > 1 else None,
        prefix_caching=False,
        gpu_memory_utilization=None if sim else config.gpu_memory_utilization,
        api_key=config.api_key,
        engine_config=config.engine_config,
    )


def _sim_gpu(name: str) -> str:
    """The GPU the sim engine simulates: a preset name, or h100-sxm for "auto"."""
    return SIM_DEFAULT_GPU if name.strip().lower() == "auto" else resolve_gpu(name).name


def _engine_timer(
    config: ProfileConfig, shape: ModelShape, on_start: ProgressCallback | None = None
) -> IterationTimer:
    from budgettune.model.profile import detect_hardware
    from budgettune.profiling.measure import EngineTimer

    spec = config.engine_spec or engine_launch_spec(config, shape)
    if config.engine == "sim":
        gpu = spec.gpu or SIM_DEFAULT_GPU
        hardware = Hardware("sim", f"simulated {gpu}", preset=gpu)
    else:
        hardware = detect_hardware(config.gpu_name)
    timer = EngineTimer(
        config.engine,
        spec,
        vocab=shape.vocab,
        hardware=hardware,
        seed=config.seed,
        request_timeout_s=config.probe_timeout_s or 600.0,
        on_start=on_start,
    )
    if timer.kv_capacity_tokens is None and config.engine == "sim":
        timer.kv_capacity_tokens = _sim_kv_capacity_tokens(config, shape, spec.gpu)
    return timer


def _sim_kv_capacity_tokens(
    config: ProfileConfig, shape: ModelShape, gpu: str | None, tensor_parallel: int = 1
) -> int:
    """The sim engine's KV cache, from the same presets it computes it from (its defaults:
    gpu-memory-utilization 0.9, blocks of 16); on ``tensor_parallel`` GPUs for a database."""
    from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE, kv_capacity_blocks

    dtype = "bfloat16" if config.dtype == "auto" else config.dtype
    card = resolve_gpu(gpu or SIM_DEFAULT_GPU)
    model = StepModel.from_hardware(shape, card, bytes_per_weight=dtype_bytes(dtype))
    blocks = kv_capacity_blocks(model, card, tensor_parallel=tensor_parallel)
    return blocks * DEFAULT_BLOCK_SIZE


def _accounting(config: ProfileConfig) -> str:
    """How the profiled engine counts parameters: vLLM's (and SGLang's, torch's: one logits row
    per sequence, the embedding a lookup), except the sim engine, which runs the accounting of
    the calibration it was started with."""
    if config.engine != "sim":
        return "engine"
    return config.calibration.resolve(_calibrated_gpu_name(config.gpu_name)).accounting


def _measured(
    config: ProfileConfig,
    shape: ModelShape,
    created: str,
    progress: ProgressFn | None,
    timer_factory: Callable[[ProfileConfig, ModelShape], IterationTimer],
) -> tuple[Profile, HeldEngine | None]:
    """The profile measured on the timer's engine, and that engine still running when the
    config asks to keep it (``engine_spec``) and every probe ran; else it is stopped."""
    # scipy (about 2 s to import) only when a profile is measured, not at CLI start-up
    from budgettune.model.ridge import fit_ridge

    timer = timer_factory(config, shape)
    held = None
    try:
        dtype = str(timer.engine.settings.get("dtype") or config.dtype)
        weight_bytes = dtype_bytes("bfloat16" if dtype == "auto" else dtype)
        constants = shape_constants(shape, weight_bytes, _accounting(config))
        rng = np.random.default_rng(config.seed)

        def knee_finder(probes: list[Probe]) -> float | None:
            ridge = fit_ridge(
                probes, attention_ratio=constants.attention_ratio, rng=rng, bootstrap=0
            )
            return ridge.knee_tokens

        # Decoders must all fit the KV cache at once (their outputs too): probes holding more
        # than KV_PLAN_SHARE of what the engine can hold are left out of the plan.
        capacity = getattr(timer, "kv_capacity_tokens", None)
        kv_budget = int(capacity * KV_PLAN_SHARE) if capacity else None
        plan = _plan(config, shape, kv_token_budget=kv_budget)
        if config.engine == "aiconfigurator":  # an estimate is the same every time
            plan = ProfilePlan(plan.probes, 1, refine_knee=plan.refine_knee)
        budget_s = time_budget(config)

        def probe_cost(spec: ProbeSpec, measured: list[Probe]) -> float:
            prefill = [p for p in measured if p.series == "prefill"]
            return probe_cost_s(spec, prefill, plan.repeats)

        run = run_probes(
            plan,
            timer,
            progress=progress,
            probe_timeout_s=config.probe_timeout_s,
            knee_finder=knee_finder,
            max_tokens=config.max_tokens,
            time_budget_s=budget_s,
            probe_cost=probe_cost,
        )
        spec = config.engine_spec
        if spec is not None and spec.budget_tokens is not None and run.error is None:
            held = HeldEngine(timer, spec.budget_tokens)
    finally:
        close = getattr(timer, "close", None)
        if held is None and close is not None:
            close()
    try:
        return _fitted(config, shape, created, timer, run, weight_bytes, rng, budget_s), held
    except BaseException:
        if held is not None:
            held.close()
        raise


def _fitted(
    config: ProfileConfig,
    shape: ModelShape,
    created: str,
    timer: IterationTimer,
    run: ProbeRun,
    weight_bytes: float,
    rng: np.random.Generator,
    budget_s: float | None,
) -> Profile:
    """The profile of ``run``'s probes: the ridge and the step model fitted to them."""
    dtype = str(timer.engine.settings.get("dtype") or config.dtype)
    probes = tuple(run.probes)
    ridge, step = fit_profile(
        probes,
        shape,
        weight_bytes,
        accounting=_accounting(config),
        calibration=config.calibration,
        bootstrap=config.bootstrap,
        rng=rng,
        preset=timer.hardware.preset,
        request_overhead_series=timer.request_overhead_series,
        cpu_free=config.engine == "aiconfigurator",  # the database adds no CPU time
    )
    estimate = config.engine == "aiconfigurator"
    return Profile(
        kind="estimate" if estimate else "measured",
        label=_estimate_label() if estimate else MEASURED_LABEL,
        created_utc=created,
        budgettune_version=__version__,
        hardware=timer.hardware,
        engine=timer.engine,
        model=ModelInfo(config.model, shape, dtype, weight_bytes, weight_bytes),
        probes=probes,
        ridge=ridge,
        step=step,
        complete=run.error is None,
        error=run.error,
        elapsed_s=run.elapsed_s,
        time_budget_s=budget_s,
        skipped=tuple(item.describe() for item in run.skipped),
    )


CPU_TIME_BUDGET_S = 60.0  # --time-budget auto where the engine sees no GPU
GPU_ENGINE_NAMES = ("vllm", "sglang", "trtllm")


def time_budget(config: ProfileConfig) -> float | None:
    """The probing budget in seconds for ``config`` (None: the whole grid). ``auto`` gives
    CPU_TIME_BUDGET_S to vLLM, SGLang and TensorRT-LLM when nvidia-smi lists no GPU (their CPU
    builds, where one large decode probe costs a minute) and no budget elsewhere: on a GPU the
    whole grid is what a calibration rests on, and takes minutes, not tens of them."""
    value = config.time_budget_s
    if value != "auto":
        return None if value is None else float(value)
    if config.engine not in GPU_ENGINE_NAMES:
        return None
    from budgettune.model.profile import query_gpus

    return None if query_gpus("index") else CPU_TIME_BUDGET_S


def _estimate_label() -> str:
    from budgettune.profiling.aiconfigurator import ESTIMATE_LABEL

    return ESTIMATE_LABEL


def _imported(config: ProfileConfig, shape: ModelShape, created: str) -> Profile:
    """``--from FILE.csv``: :func:`~budgettune.app.profile_fit.imported_profile`."""
    assert config.from_csv is not None
    return imported_profile(
        config.from_csv,
        model_source=config.model,
        shape=shape,
        gpu_name=config.gpu_name,
        dtype=config.dtype,
        tensor_parallel=config.tensor_parallel,
        calibration=config.calibration,
        bootstrap=config.bootstrap,
        seed=config.seed,
        created_utc=created,
    )


def summarize(profile: Profile, typical_batch: int, typical_context: int) -> BudgetSummary | None:
    """Budget floor from the measured knee; TBT budgets from the fitted step-time model."""
    if profile.step is None:
        return None
    model = profile_step_model(profile)
    ridge = profile.ridge
    knee = ridge.knee_tokens if ridge is not None and ridge.knee_found else None
    if knee is not None:
        floor: int | None = round_up(knee + typical_batch, BUDGET_ALIGN)
        reason = (
            f"knee {knee:.0f} + {typical_batch} decodes, rounded up to a multiple of {BUDGET_ALIGN}"
        )
    else:
        floor = None
        reason = ridge.reason if ridge is not None else "no prefill probes"
    budgets = []
    for target in TBT_TARGETS_S:
        best = None
        for budget in range(BUDGET_ALIGN, MAX_BUDGET_TOKENS + 1, BUDGET_ALIGN):
            if iteration_with_batch_s(model, budget, typical_batch, typical_context) > target:
                break
            best = budget
        budgets.append((target, best))
    return BudgetSummary(
        knee_tokens=knee,
        floor_tokens=floor,
        floor_reason=reason,
        typical_batch=typical_batch,
        typical_context=typical_context,
        tbt_budgets=tuple(budgets),
        model_ridge_tokens=model.ridge_tokens,
    )
