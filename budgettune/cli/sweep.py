"""`budgettune sweep`: the main job. Candidates from the step-time model, live verification of
as few of them as the interval search needs, the verdict, and the engine configs."""

from __future__ import annotations

import datetime as _dt
import platform
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import _click

from budgettune.cli import Command, app
from budgettune.cli import _engine_options as eo
from budgettune.cli import _model_options as mo
from budgettune.cli import _trace_options as to
from budgettune.cli._common import console_err, print_json, print_warning
from budgettune.cli._sweep_display import print_result, profile_with_progress, run_with_progress
from budgettune.core.engine_defaults import default_budget_on
from budgettune.core.errors import SpecError
from budgettune.core.hardware import resolve_gpu
from budgettune.core.units import parse_duration_s, parse_int_list
from budgettune.engines.base import LaunchSpec
from budgettune.engines.registry import engine_names
from budgettune.model.stepmodel import StepModel
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig

if TYPE_CHECKING:  # the sweep and profile pipelines load when the command runs
    from budgettune.app.profile import ProfileConfig
    from budgettune.tune.gpu import DetectedGPU

SLO_PANEL = "SLOs"
SEARCH_PANEL = "Search"
DEFAULT_RATE_PER_S = 8.0
DEFAULT_REQUESTS = 240
NO_FEASIBLE_BUDGET_EXIT = 3
ANALYTIC = "analytic"  # --profile analytic: the presets' roofline, no profile step
ParameterSource = _click.core.ParameterSource


@app.command(cls=Command)
def sweep(
    ctx: typer.Context,
    slo_tbt: str | None = typer.Option(
        None, "--slo-tbt", help="p99 time-between-tokens target, e.g. 50ms (required, except "
        "with --resume, which reads it from the run folder).", rich_help_panel=SLO_PANEL,
    ),
    slo_ttft: str = typer.Option(
        "1s", "--slo-ttft", help="p99 time-to-first-token target.", rich_help_panel=SLO_PANEL
    ),
    percentile: float = typer.Option(
        99.0, "--percentile", help="The percentile both SLOs constrain, 50-100.",
        rich_help_panel=SLO_PANEL,
    ),
    engine: str = typer.Option(
        "auto", "--engine", help="auto (vLLM when installed and a GPU is visible, else sim), "
        "vllm, sglang, sim (built in) or external (with --url).", rich_help_panel=eo.PANEL,
    ),
    url: str | None = eo.URL,
    model: str | None = typer.Option(
        None, "--model", help="Model to serve: a folder or Hugging Face id for vLLM/SGLang; for "
        "sim a preset or config.json (default llama-3.1-8b).", rich_help_panel=eo.PANEL,
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU preset for predictions and the sim engine (default h100-sxm).",
        rich_help_panel=eo.PANEL,
    ),
    profile: Path | None = typer.Option(
        None, "--profile", help="A profile from `budgettune profile` (calibrated step-time "
        "model). Without one, vllm and sglang run the profile step first (saved as "
        "<run>/profile.json; --resume reuses it); sim and external predict with the analytic "
        "roofline of --model on --gpu. 'analytic' uses that roofline and skips the profile step.",
        rich_help_panel=eo.PANEL,
    ),
    max_num_seqs: int = eo.MAX_NUM_SEQS,
    engine_cmd: str | None = eo.ENGINE_CMD,
    env: list[str] = eo.ENGINE_ENV,
    engine_arg: list[str] = eo.ENGINE_ARG,
    dtype: str | None = eo.DTYPE,
    tensor_parallel_size: int | None = eo.TENSOR_PARALLEL_SIZE,
    gpu_memory_utilization: float | None = eo.GPU_MEMORY_UTILIZATION,
    prefix_caching: str = eo.PREFIX_CACHING,
    health_timeout: str | None = eo.HEALTH_TIMEOUT,
    trace: Path | None = to.TRACE,
    format: str | None = to.FORMAT,
    columns: str | None = to.COLUMNS,
    arrivals: str | None = to.ARRIVALS,
    rate: float | None = to.RATE,
    burstiness: float = to.BURSTINESS,
    time_scale: float = to.TIME_SCALE,
    window: str | None = to.WINDOW,
    requests: int | None = to.REQUESTS,
    duration: str | None = to.DURATION,
    max_model_len: str | None = to.MAX_MODEL_LEN,
    on_long: str = to.ON_LONG,
    strict: bool = to.STRICT,
    seed: int = to.SEED,
    prompt_dist: str | None = to.PROMPT_DIST,
    output_dist: str | None = to.OUTPUT_DIST,
    budgets: str | None = typer.Option(
        None, "--budgets", help="Candidate budgets, tokens, comma-separated (default: multiples "
        "of --align from the ridge floor to the TBT ceiling, plus one step above).",
        rich_help_panel=SEARCH_PANEL,
    ),
    align: int = typer.Option(
        256, "--align", help="Candidates are multiples of this many tokens (a multiple of the "
        "KV block size, 16).", rich_help_panel=SEARCH_PANEL,
    ),
    goodput: bool = typer.Option(
        False, "--goodput", help="Also find each verified budget's highest rate (requests/s) "
        "meeting both SLOs, one engine launch per budget.", rich_help_panel=SEARCH_PANEL,
    ),
    baseline: str = typer.Option(
        "auto", "--baseline", help="The budget you run today, measured as the reference line: "
        "auto (the engine's default: vLLM 8192 on GPUs of at least 70 GiB other than A100, else "
        "2048; SGLang by GPU memory), a number of tokens, or none to skip it.",
        rich_help_panel=SEARCH_PANEL,
    ),
    exhaustive: bool = typer.Option(
        False, "--exhaustive", help="Verify every candidate in full, without the search or "
        "early stop (the grid other tools run; for comparison).", rich_help_panel=SEARCH_PANEL,
    ),
    warmup: int = typer.Option(
        0, "--warmup", min=0, help="Leave the first N requests of each replay out of the "
        "statistics.", rich_help_panel=SEARCH_PANEL,
    ),
    request_timeout: str = typer.Option(
        "300s", "--request-timeout", help="Fail a request whose stream stalls this long.",
        rich_help_panel=SEARCH_PANEL,
    ),
    max_error_rate: float | None = typer.Option(
        0.5, "--max-error-rate", help="Abort a replay once more than this share (0-1) of "
        "finished requests failed.", rich_help_panel=SEARCH_PANEL,
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Run folder (default reports/sweep-<date-time>).",
        rich_help_panel=SEARCH_PANEL,
    ),
    resume: Path | None = typer.Option(
        None, "--resume", help="Continue the sweep in this run folder with the options it was "
        "started with (options given again must match, except --engine-cmd, --env and the "
        "timeouts); finished budgets are not re-run.", rich_help_panel=SEARCH_PANEL,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print recommendation.json to stdout."),
) -> None:  # fmt: skip
    """Recommend the largest token budget whose p99 TBT and TTFT meet your SLOs, verified live.

    Candidates come from the step-time model (ridge floor to TBT ceiling); the simulator
    predicts each; the engine is launched and your traffic replayed only for the budgets the
    interval search needs. Writes recommendation.json, vllm.yaml and sglang.args.
    Exit code 0 with a recommendation, 3 when no budget meets both SLOs.
    `--resume DIR` alone continues the sweep in DIR with the options it was started with.
    """
    options = {name: value for name, value in locals().items() if name != "ctx"}
    if resume is not None:
        options = _restored(ctx, resume, options)
    _sweep(**options)


def _restored(ctx: typer.Context, run_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    """The options of the sweep in ``run_dir`` (checked to exist first), with those typed on
    this command line, which must ask the same question."""
    from budgettune.artifacts.sweep_options import read_saved_options, restore_options

    saved = read_saved_options(run_dir)
    if saved is None:  # a sweep saved before its options were: give them again
        return options
    given = {
        name for name in options if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    flags = {param.name: max(param.opts, key=len) for param in ctx.command.params if param.name}
    return restore_options(run_dir, saved, options, given, flags)


def _sweep(
    *, slo_tbt: str | None, slo_ttft: str, percentile: float, engine: str, url: str | None,
    model: str | None, gpu: str | None, profile: Path | None, max_num_seqs: int,
    engine_cmd: str | None, env: list[str], engine_arg: list[str], dtype: str | None,
    tensor_parallel_size: int | None, gpu_memory_utilization: float | None,
    prefix_caching: str, health_timeout: str | None, trace: Path | None, format: str | None,
    columns: str | None, arrivals: str | None, rate: float | None, burstiness: float,
    time_scale: float, window: str | None, requests: int | None, duration: str | None,
    max_model_len: str | None, on_long: str, strict: bool, seed: int, prompt_dist: str | None,
    output_dist: str | None, budgets: str | None, align: int, goodput: bool, baseline: str,
    exhaustive: bool, warmup: int, request_timeout: str, max_error_rate: float | None,
    output: Path | None, resume: Path | None, as_json: bool,
) -> None:  # fmt: skip
    """The sweep with every option resolved (a resumed sweep's from its run folder)."""
    options = dict(locals())  # as given, saved for --resume (before the defaults below)
    from budgettune.app.sweep import PROFILE_FILE, open_run
    from budgettune.artifacts.sweep_options import OPTIONS_KEY, saved_options
    from budgettune.loadgen.runner import RunOptions
    from budgettune.tune.sweep_config import SweepConfig

    if slo_tbt is None:
        raise SpecError(
            "--slo-tbt: required (the p99 time-between-tokens target, e.g. 50ms)",
            hint=None if resume is None else f"{resume} saved no options; give them again",
        )
    slo_tbt_s = parse_duration_s(slo_tbt, field="--slo-tbt")
    slo_ttft_s = parse_duration_s(slo_ttft, field="--slo-ttft")
    if not 50 <= percentile < 100:
        raise SpecError(f"--percentile: must be in [50, 100), got {percentile:g}")
    if align <= 0 or align % 16:
        raise SpecError(
            f"--align: must be a positive multiple of the KV block size 16, got {align}"
        )
    if output is not None and resume is not None and output != resume:
        raise SpecError("--resume and -o name different folders; give one of them")
    engine_name, why = eo.resolve_auto_engine(engine, url, engine_cmd)
    if resume is not None and engine_name != "external":
        why = f"engine {engine_name} (as the sweep in {resume} ran)"
    if engine_name not in engine_names():  # before any planning or run folder
        raise SpecError(
            f"--engine: unknown engine {engine!r}; known: auto, {', '.join(engine_names())}"
        )
    if engine_name == "external" and url is None:
        raise SpecError("--url: the external engine needs the server's URL")
    if engine_name == "sim":
        model = model or "llama-3.1-8b"
        gpu = gpu or "h100-sxm"
    if engine_name in ("vllm", "sglang") and not model:
        raise SpecError(f"--model: the {engine_name} engine needs a model (a folder or an id)")
    detected = None
    if engine_name in ("vllm", "sglang") and gpu is None:
        from budgettune.tune.gpu import detect_gpu

        detected = detect_gpu()  # for the engine's default budget and the step-time model
    gpu_card = resolve_gpu(gpu) if gpu else detected and detected.preset
    analytic = profile is not None and str(profile) == ANALYTIC
    measure_first = profile is None and engine_name in ("vllm", "sglang")
    run_dir = (
        resume or output or Path("reports") / _dt.datetime.now().strftime("sweep-%Y%m%d-%H%M%S")
    )
    if synthetic := trace is None and rate is None:
        rate = DEFAULT_RATE_PER_S
    traffic = to.traffic_from_options(
        trace=trace, format=format, columns=columns, arrivals=arrivals, rate=rate,
        burstiness=burstiness, time_scale=time_scale, window=window, requests=requests,
        duration=duration, max_model_len=max_model_len, on_long=on_long, strict=strict,
        seed=seed, prompt_dist=prompt_dist, output_dist=output_dist,
        default_requests=DEFAULT_REQUESTS,
        on_warning=print_warning,
    )  # fmt: skip
    schedule = traffic.schedule
    if warmup >= len(schedule):
        raise SpecError(f"--warmup: {warmup} leaves none of {len(schedule)} requests")
    if profile is not None and not analytic and engine_name == "sim":
        # the engine runs the predictions' model
        engine_arg = [*engine_arg, shlex.join(["--profile", str(profile.resolve())])]
    spec = eo.launch_spec_from_options(
        engine=engine_name, model=model, gpu=gpu, max_num_seqs=max_num_seqs,
        max_model_len=max_model_len, engine_cmd=engine_cmd, env=env, engine_arg=engine_arg,
        dtype=dtype, tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization, prefix_caching=prefix_caching,
        health_timeout=health_timeout, url=url,
    )  # fmt: skip
    default_budget = _baseline(baseline, engine_name, gpu_card, detected)
    candidate_budgets = tuple(parse_int_list(budgets, field="--budgets")) if budgets else None
    profiling = None
    if measure_first:
        assert model is not None  # checked above for vllm and sglang
        profiling = _profile_config(
            run_dir, spec, engine_name, model, gpu, candidate_budgets, default_budget, seed
        )
        step_model, model_source = None, ""
    else:
        step_model, model_source = _step_model(
            profile, model, gpu_card.name if gpu_card else None, engine_name
        )
        if detected is not None and detected.name and detected.preset is None:
            model_source += (
                f"; no GPU preset matches {detected.name}, so h100-sxm's figures are used "
                "(--gpu names another)"
            )
    settings: dict[str, Any] = {
        "slo_tbt_s": slo_tbt_s, "slo_ttft_s": slo_ttft_s, "percentile": percentile,
        "engine": engine_name, "traffic": traffic.description, "model": model, "gpu": gpu,
        "profile": str(run_dir / PROFILE_FILE) if measure_first else profile and str(profile),
        "budgets": budgets, "align": align,
        "max_num_seqs": max_num_seqs, "engine_cmd": engine_cmd, "engine_args": engine_arg,
        "env": env, "dtype": dtype, "prefix_caching": prefix_caching, "trace": str(trace)
        if trace else None, "rate": rate, "synthetic": synthetic, "requests": len(schedule),
        "warmup": warmup, "seed": seed, "goodput": goodput, "exhaustive": exhaustive,
        "baseline": default_budget,
    }  # fmt: skip
    settings[OPTIONS_KEY] = saved_options({**options, "engine": engine_name})
    # provenance recorded now, so the report need not guess it later
    settings["python_version"] = platform.python_version()
    if trace is not None:
        from budgettune.app.simulate import file_sha256

        settings["trace_sha256"] = file_sha256(trace)
    console_err.print(why, highlight=False)
    if detected is not None:
        console_err.print(_detected_line(detected, engine_name, baseline, default_budget))
    finished = open_run(run_dir, settings, resume=resume is not None)
    if resume is not None:
        console_err.print(
            f"resuming {run_dir}: {len(finished)} budget(s) already measured", highlight=False
        )
    if profiling is not None:
        step_model, model_source = _measure_first(profiling, run_dir)
        gpu_card = gpu_card or _profile_gpu(run_dir / PROFILE_FILE)
    assert step_model is not None
    console_err.print(f"step-time model: {model_source}", highlight=False)
    console_err.print(f"traffic: {traffic.description}", highlight=False)
    config = SweepConfig(
        slo_tbt_s=slo_tbt_s,
        slo_ttft_s=slo_ttft_s,
        percentile=percentile,
        engine=engine_name,
        base_spec=spec,
        run=RunOptions(
            max_error_rate=max_error_rate,
            request_timeout_s=parse_duration_s(request_timeout, field="--request-timeout"),
            seed=seed,
            warmup_requests=warmup,
        ),
        step_model=step_model,
        model_source=model_source,
        scheduler=_scheduler(step_model, gpu_card, max_num_seqs, tensor_parallel_size or 1),
        traffic=traffic.description,
        rate_per_s=schedule.rate_per_s,
        asked_rate_per_s=rate,
        requests=len(schedule),
        run_dir=run_dir,
        budgets=candidate_budgets,
        align_tokens=align,
        default_budget=default_budget,
        baseline_label="Your engine default" if baseline == "auto" else "Your current budget",
        goodput=goodput,
        exhaustive=exhaustive,
        resume=resume is not None,
        settings=settings,
        command=("budgettune", *sys.argv[1:]),
        hardware={
            "gpu": gpu_card.name if gpu_card else None,
            **({"gpu_detected": detected.describe()} if detected else {}),
            "model": model,
        },
        served_model=model if engine_name in ("vllm", "sglang") else None,
    )
    result = run_with_progress(config, traffic.at_rate, schedule, finished)
    if as_json:
        print_json(result.document)
    else:
        print_result(result, config)
    if result.recommendation.budget_tokens is None:
        raise typer.Exit(NO_FEASIBLE_BUDGET_EXIT)


def _baseline(text: str, engine: str, gpu_card: Any, detected: DetectedGPU | None) -> int | None:
    """The reference budget: the engine's default for ``auto`` (on the detected GPU when
    --gpu is not given), a number, or None."""
    choice = text.strip().lower()
    if choice == "none":
        return None
    if choice == "auto":
        if engine == "external":
            return None  # a running server's budget is whatever it was started with
        if detected is not None:
            return detected.default_budget(engine)[0]
        return default_budget_on(engine, gpu_card).budget_tokens
    try:
        value = int(choice)
    except ValueError:
        raise SpecError(f"--baseline: use auto, none or a number of tokens, got {text!r}") from None
    if value <= 0:
        raise SpecError(f"--baseline: must be positive, got {value}")
    return value


def _detected_line(
    detected: DetectedGPU, engine: str, baseline: str, default_budget: int | None
) -> str:
    """One line: the card nvidia-smi shows and the reference budget it implies."""
    text = f"GPU: {detected.describe()}; "
    choice = baseline.strip().lower()
    if choice == "auto":
        budget, rule = detected.default_budget(engine)
        return text + f"engine default budget {budget} ({rule})"
    if choice == "none":
        return text + "no reference budget (--baseline none)"
    return text + f"reference budget {default_budget} (--baseline)"


def _step_model(
    profile: Path | None, model: str | None, gpu: str | None, engine: str
) -> tuple[StepModel, str]:
    """The predictions' model from --profile FILE, else the analytic roofline, with a line
    saying which and why."""
    if profile is not None and str(profile) != ANALYTIC:
        from budgettune.model.profile import load_profile, profile_step_model

        return profile_step_model(load_profile(profile)), f"calibrated profile {profile}"
    shape_source = model or "llama-3.1-8b"
    card = gpu or "h100-sxm"
    step_model = mo.step_model_from_options(
        model=shape_source, gpu=resolve_gpu(card), dtype="bfloat16", tensor_parallel=1,
        compute_efficiency=mo.DEFAULT_COMPUTE_EFFICIENCY,
        bandwidth_efficiency=mo.DEFAULT_BANDWIDTH_EFFICIENCY,
        overhead_ms=mo.DEFAULT_OVERHEAD_S * 1e3, mode="overlapped",
    )  # fmt: skip
    roofline = f"analytic roofline of {shape_source} on {card}"
    if profile is not None:
        return step_model, f"{roofline} (--profile analytic: presets, not measured)"
    if engine == "sim":
        return step_model, (
            f"{roofline} (the analytic profile: the sim engine runs the same presets; "
            "`budgettune profile` calibrates one for real hardware)"
        )
    return step_model, (
        f"{roofline}: predictions are analytic (presets, not measured); a server you run "
        "cannot be profiled without launching one, so run `budgettune profile --engine vllm` "
        "where it runs and pass --profile FILE"
    )


def _profile_config(
    run_dir: Path,
    spec: LaunchSpec,
    engine: str,
    model: str,
    gpu: str | None,
    budgets: tuple[int, ...] | None,
    default_budget: int | None,
    seed: int,
) -> ProfileConfig:
    """The profile step on the sweep's own engine options, sized to the budgets it considers
    (--budgets and the reference, else `budgettune profile`'s 8192 tokens)."""
    from budgettune.app.sweep import profile_config

    return profile_config(
        run_dir, engine=engine, model=model, gpu=gpu, max_num_seqs=spec.max_num_seqs or 256,
        budgets=budgets, reference_budget=default_budget, seed=seed, dtype=spec.dtype,
        tensor_parallel=spec.tensor_parallel_size,
        gpu_memory_utilization=spec.gpu_memory_utilization, engine_args=spec.extra_args,
        engine_cmd=spec.engine_cmd, engine_env=dict(spec.env),
        health_timeout_s=spec.health_timeout_s,
    )  # fmt: skip


def _measure_first(config: ProfileConfig, run_dir: Path) -> tuple[StepModel, str]:
    """Without --profile on a real engine: the profile this run folder already holds (a resumed
    sweep), else the profile step run now, saying so and where."""
    from budgettune.app.sweep import saved_profile
    from budgettune.model.profile import profile_step_model

    assert config.output is not None
    saved = saved_profile(run_dir)
    if saved is not None:
        console_err.print(
            f"profile: reusing {config.output}, measured by this sweep before it was interrupted",
            highlight=False,
        )
        return profile_step_model(saved), f"calibrated profile {config.output} (measured first)"
    console_err.print(
        f"no --profile: profiling {config.engine} first (prompts to {config.max_tokens} tokens, "
        f"decode batches to {config.max_batch}) into {config.output}; --profile analytic "
        "skips this",
        highlight=False,
    )
    outcome = profile_with_progress(config)
    measured = outcome.profile
    ridge = measured.ridge.reason if measured.ridge is not None else "no ridge"
    console_err.print(
        f"profile: {len(measured.probes)} probes in {measured.elapsed_s or 0:.0f} s, saved "
        f"{outcome.json_path} (curve {outcome.csv_path}, report "
        f"{config.output.with_suffix('.html')}); {ridge}",
        highlight=False,
    )
    return profile_step_model(measured), f"calibrated profile {config.output} (measured first)"


def _profile_gpu(path: Path) -> Any:
    """The GPU preset a measured profile names (sizes the predictions' KV cache), if any."""
    from budgettune.model.profile import load_profile

    preset = load_profile(path).hardware.preset
    return resolve_gpu(preset) if preset else None


def _scheduler(
    step_model: StepModel, gpu_card: Any, max_num_seqs: int, tensor_parallel: int
) -> SchedulerConfig:
    blocks = kv_capacity_blocks(
        step_model, gpu_card or resolve_gpu("h100-sxm"), tensor_parallel=tensor_parallel
    )
    return SchedulerConfig(budget_tokens=None, kv_capacity_blocks=blocks, max_num_seqs=max_num_seqs)
