"""`budgettune sweep`: the main job. Candidates from the step-time model, live verification of
as few of them as the interval search needs, the verdict, and the engine configs."""

from __future__ import annotations

import asyncio
import datetime as _dt
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from budgettune.cli import _engine_options as eo
from budgettune.cli import _model_options as mo
from budgettune.cli import _trace_options as to
from budgettune.cli import app
from budgettune.cli._common import console, console_err, print_json, print_warning
from budgettune.engine.base import EngineHandle, StartProgress
from budgettune.engine.registry import engine_names
from budgettune.errors import SpecError
from budgettune.hardware import resolve_gpu
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.stepmodel import StepModel
from budgettune.sweep.candidates import sglang_default_budget, vllm_default_budget
from budgettune.units import format_ms, parse_duration_s, parse_int_list

if TYPE_CHECKING:  # the live runner (httpx) and the sweep pipeline load when the command runs
    from budgettune.load.runner import RunProgress
    from budgettune.pipeline.sweep import SweepConfig, SweepResult

SLO_PANEL = "SLOs"
SEARCH_PANEL = "Search"
DEFAULT_RATE_PER_S = 8.0
DEFAULT_REQUESTS = 240
NO_FEASIBLE_BUDGET_EXIT = 3


@app.command()
def sweep(
    slo_tbt: str = typer.Option(
        ..., "--slo-tbt", help="p99 time-between-tokens target, e.g. 50ms (required).",
        rich_help_panel=SLO_PANEL,
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
        "model). Without one, the analytic model of --model on --gpu predicts.",
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
        None, "--resume", help="Continue the sweep in this run folder; finished budgets are "
        "not re-run.", rich_help_panel=SEARCH_PANEL,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print recommendation.json to stdout."),
) -> None:  # fmt: skip
    """Recommend the largest token budget whose p99 TBT and TTFT meet your SLOs, verified live.

    Candidates come from the step-time model (ridge floor to TBT ceiling); the simulator
    predicts each; the engine is launched and your traffic replayed only for the budgets the
    interval search needs. Writes recommendation.json, vllm.yaml and sglang.args.
    Exit code 0 with a recommendation, 3 when no budget meets both SLOs.
    """
    from budgettune.load.runner import RunOptions
    from budgettune.pipeline.sweep import SweepConfig

    slo_tbt_s = parse_duration_s(slo_tbt, option="--slo-tbt")
    slo_ttft_s = parse_duration_s(slo_ttft, option="--slo-ttft")
    if not 50 <= percentile < 100:
        raise SpecError(f"--percentile: must be in [50, 100), got {percentile:g}")
    if align <= 0 or align % 16:
        raise SpecError(
            f"--align: must be a positive multiple of the KV block size 16, got {align}"
        )
    if output is not None and resume is not None and output != resume:
        raise SpecError("--resume and -o name different folders; give one of them")
    engine_name, why = eo.resolve_auto_engine(engine, url, engine_cmd)
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
    gpu_card = resolve_gpu(gpu) if gpu else None
    step_model, model_source = _step_model(profile, model, gpu)
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
    if profile is not None and engine_name == "sim":  # the engine runs the predictions' model
        engine_arg = [*engine_arg, shlex.join(["--profile", str(profile.resolve())])]
    spec = eo.launch_spec_from_options(
        engine=engine_name, model=model, gpu=gpu, max_num_seqs=max_num_seqs,
        max_model_len=max_model_len, engine_cmd=engine_cmd, env=env, engine_arg=engine_arg,
        dtype=dtype, tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization, prefix_caching=prefix_caching,
        health_timeout=health_timeout, url=url,
    )  # fmt: skip
    default_budget = _baseline(baseline, engine_name, gpu_card)
    run_dir = (
        resume or output or Path("reports") / _dt.datetime.now().strftime("sweep-%Y%m%d-%H%M%S")
    )
    settings: dict[str, Any] = {
        "slo_tbt_s": slo_tbt_s, "slo_ttft_s": slo_ttft_s, "percentile": percentile,
        "engine": engine_name, "traffic": traffic.description, "model": model, "gpu": gpu,
        "profile": str(profile) if profile else None, "budgets": budgets, "align": align,
        "max_num_seqs": max_num_seqs, "engine_cmd": engine_cmd, "engine_args": engine_arg,
        "env": env, "dtype": dtype, "prefix_caching": prefix_caching, "trace": str(trace)
        if trace else None, "rate": rate, "synthetic": synthetic, "requests": len(schedule),
        "warmup": warmup, "seed": seed, "goodput": goodput, "exhaustive": exhaustive,
        "baseline": default_budget,
    }  # fmt: skip
    config = SweepConfig(
        slo_tbt_s=slo_tbt_s,
        slo_ttft_s=slo_ttft_s,
        percentile=percentile,
        engine=engine_name,
        base_spec=spec,
        run=RunOptions(
            max_error_rate=max_error_rate,
            request_timeout_s=parse_duration_s(request_timeout, option="--request-timeout"),
            seed=seed,
            warmup_requests=warmup,
        ),
        step_model=step_model,
        model_source=model_source,
        scheduler=_scheduler(step_model, gpu_card, max_num_seqs, tensor_parallel_size or 1),
        traffic=traffic.description,
        rate_per_s=schedule.rate_per_s,
        run_dir=run_dir,
        budgets=tuple(parse_int_list(budgets, option="--budgets")) if budgets else None,
        align_tokens=align,
        default_budget=default_budget,
        baseline_label="Your engine default" if baseline == "auto" else "Your current budget",
        goodput=goodput,
        exhaustive=exhaustive,
        resume=resume is not None,
        settings=settings,
        command=("budgettune", *sys.argv[1:]),
        hardware={"gpu": gpu_card.name if gpu_card else None, "model": model},
        served_model=model if engine_name in ("vllm", "sglang") else None,
    )
    console_err.print(why, highlight=False)
    console_err.print(f"step-time model: {model_source}", highlight=False)
    console_err.print(f"traffic: {traffic.description}", highlight=False)
    result = _run_with_progress(config, traffic.at_rate, schedule)
    if as_json:
        print_json(result.document)
    else:
        _print_result(result, config)
    if result.recommendation.budget_tokens is None:
        raise typer.Exit(NO_FEASIBLE_BUDGET_EXIT)


def _baseline(text: str, engine: str, gpu_card: Any) -> int | None:
    """The reference budget: the engine's default for ``auto``, a number, or None."""
    choice = text.strip().lower()
    if choice == "none":
        return None
    if choice == "auto":
        if engine == "external":
            return None  # a running server's budget is whatever it was started with
        if engine == "sglang":
            return sglang_default_budget(gpu_card)
        return vllm_default_budget(gpu_card)
    try:
        value = int(choice)
    except ValueError:
        raise SpecError(f"--baseline: use auto, none or a number of tokens, got {text!r}") from None
    if value <= 0:
        raise SpecError(f"--baseline: must be positive, got {value}")
    return value


def _step_model(profile: Path | None, model: str | None, gpu: str | None) -> tuple[StepModel, str]:
    if profile is not None:
        from budgettune.profile.schema import load_profile, profile_step_model

        return profile_step_model(load_profile(profile)), f"calibrated profile {profile}"
    shape_source = model or "llama-3.1-8b"
    card = gpu or "h100-sxm"
    step_model = mo.step_model_from_options(
        model=shape_source, gpu=resolve_gpu(card), dtype="bfloat16", tensor_parallel=1,
        compute_efficiency=mo.DEFAULT_COMPUTE_EFFICIENCY,
        bandwidth_efficiency=mo.DEFAULT_BANDWIDTH_EFFICIENCY,
        overhead_ms=mo.DEFAULT_OVERHEAD_S * 1e3, mode="overlapped",
    )  # fmt: skip
    return step_model, (
        f"analytic roofline of {shape_source} on {card} (presets, not measured; run "
        "`budgettune profile` for a calibrated one)"
    )


def _scheduler(
    step_model: StepModel, gpu_card: Any, max_num_seqs: int, tensor_parallel: int
) -> SchedulerConfig:
    blocks = kv_capacity_blocks(
        step_model, gpu_card or resolve_gpu("h100-sxm"), tensor_parallel=tensor_parallel
    )
    return SchedulerConfig(budget_tokens=None, kv_capacity_blocks=blocks, max_num_seqs=max_num_seqs)


def _run_with_progress(config: SweepConfig, schedule_at: Any, schedule: Any) -> SweepResult:
    from budgettune.pipeline.sweep import SweepEvents, run_sweep

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),  # the replay's ETA
        console=console_err,
        transient=True,
        refresh_per_second=4,  # rendering holds the GIL: keep it rare beside the timing loop
    ) as progress:
        overall = progress.add_task("planning candidates", total=None)
        replay_task = progress.add_task("replay", total=len(schedule), visible=False)

        def on_plan(candidates: Any, predictions: Any) -> None:
            progress.update(
                overall,
                description=f"sweep over {len(candidates.budgets)} candidates "
                f"({', '.join(map(str, candidates.budgets))})",
            )
            console_err.print(
                f"candidates: {', '.join(map(str, candidates.budgets))} (ridge "
                f"{candidates.ridge_tokens:.0f} tokens, expected decode batch "
                f"{candidates.decode_batch:.0f})",
                highlight=False,
            )

        def on_launch(budget: int, role: str) -> None:
            progress.update(overall, description=f"budget {budget} ({role}): starting engine")
            progress.update(replay_task, visible=False, completed=0)

        def on_start(tick: StartProgress) -> None:
            last = tick.last_log_line.strip()[-60:]
            progress.update(
                overall, description=f"{tick.engine} {tick.phase} {tick.elapsed_s:.0f}s {last}"
            )

        def on_ready(handle: EngineHandle) -> None:
            progress.update(overall, description=f"budget {handle.budget_tokens}: replaying")
            progress.update(replay_task, visible=True, completed=0)

        def on_replay(tick: RunProgress) -> None:
            progress.update(
                replay_task,
                completed=tick.finished,
                description=f"replay: {tick.sent} sent, {tick.failed} failed",
            )

        def on_point(point: dict[str, Any]) -> None:
            progress.update(replay_task, visible=False)
            console_err.print(_point_line(point, config), highlight=False)

        def on_message(text: str) -> None:
            console_err.print(text, highlight=False)

        events = SweepEvents(
            on_plan=on_plan, on_launch=on_launch, on_start=on_start, on_ready=on_ready,
            on_replay=on_replay, on_point=on_point, on_message=on_message,
        )  # fmt: skip
        return asyncio.run(run_sweep(config, schedule, schedule_at, events))


def _ms(value: float | None) -> str:
    return "-" if value is None else format_ms(value / 1e3)


def _num(value_ms: float | None) -> str:
    if value_ms is None or value_ms != value_ms:
        return "-"
    return f"{value_ms:,.0f}" if value_ms >= 100 else f"{value_ms:.1f}"


def _point_line(point: dict[str, Any], config: SweepConfig) -> str:
    if point["status"] != "measured":
        return f"  budget {point['budget']}: {point['status']}: {point.get('error')}"
    verdict = "meets both SLOs" if point["ok"] else "breaks an SLO"
    note = " (early stop)" if point.get("early_stop") else ""
    p = f"p{config.percentile:g}"
    return (
        f"  budget {point['budget']}: {p} TBT {_ms(point['tbt_ms'])}, {p} TTFT "
        f"{_ms(point['ttft_ms'])}: {verdict}{note} [{point['wall_s']:.0f} s]"
    )


def _goodput_cell(point: dict[str, Any]) -> str:
    rate = point.get("goodput_rate")
    if rate is None:
        return "-"
    return f">= {rate:.3g} (cap)" if point.get("goodput_capped") else f"{rate:.3g}"


def _print_result(result: SweepResult, config: SweepConfig) -> None:
    p = f"p{config.percentile:g}"
    table = Table(
        title=f"{p} at {config.rate_per_s:.3g} req/s, measured / predicted (SLO TBT <= "
        f"{format_ms(config.slo_tbt_s)}, TTFT <= {format_ms(config.slo_ttft_s)})",
        box=box.SIMPLE_HEAD,
    )
    columns = ["budget", "TBT ms", "TTFT ms", "tok/s", "failed", "verdict"]
    if config.goodput:
        columns.append("goodput req/s")
    for column in columns:
        table.add_column(column, justify="right")
    measured = {int(pt["budget"]): pt for pt in result.points}
    shown = {*result.candidates.budgets, *measured}
    if config.default_budget is not None:
        shown.add(config.default_budget)
    for budget in sorted(shown):
        prediction = result.predictions.get(budget)
        point = measured.get(budget)
        pred_tbt = _num(prediction.tbt_s * 1e3) if prediction else "-"
        pred_ttft = _num(prediction.ttft_s * 1e3) if prediction else "-"
        label = str(budget) + (" (default)" if budget == config.default_budget else "")
        if point is None or point["status"] != "measured":
            status = "[dim]not run[/dim]" if point is None else f"[red]{point['status']}[/red]"
            cells = [label, f"- / {pred_tbt}", f"- / {pred_ttft}", "-", "-", status]
            table.add_row(*cells, *(["-"] if config.goodput else []))
            continue
        summary = point["measured"]
        verdict = "[green]pass[/green]" if point["ok"] else "[red]fail[/red]"
        if point.get("early_stop"):
            verdict += " (early)"
        table.add_row(
            label,
            f"{_num(point['tbt_ms'])} / {pred_tbt}",
            f"{_num(point['ttft_ms'])} / {pred_ttft}",
            f"{summary['throughput_tokens_per_s'] or 0:,.0f}",
            str(summary["failed"]),
            verdict,
            *([_goodput_cell(point)] if config.goodput else []),
        )
    console.print(table)
    rec = result.recommendation
    style = "bold green" if rec.budget_tokens is not None else "bold red"
    console.print(f"[{style}]{rec.headline}[/{style}]", highlight=False)
    for reason in rec.reasons:
        console.print(f"  {reason}", highlight=False)
    console.print(
        f"{result.launches} engine launch(es), {result.wall_s:.0f} s. Files in {config.run_dir}: "
        + ", ".join(path.name for path in result.files.values()),
        highlight=False,
    )
