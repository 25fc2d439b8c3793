"""`budgettune replay`: replay traffic against one engine (launched for one budget, or --url) and
show TTFT/TBT/TPOT/E2E percentiles, failures and the load generator's self-check."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as _dt
import math
import platform
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
)
from rich.table import Table

from budgettune.app.simulate import file_sha256, parse_budgets
from budgettune.cli import Command, app
from budgettune.cli import _engine_options as eo
from budgettune.cli import _trace_options as to
from budgettune.cli._common import console, console_err, print_json, print_warning
from budgettune.core.errors import SpecError
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.core.metrics import summarize
from budgettune.core.slo import SLO
from budgettune.core.units import format_ms, parse_duration_s
from budgettune.engines.base import EngineHandle, StartProgress
from budgettune.engines.registry import engine_names

if TYPE_CHECKING:  # the live runner and the replay pipeline load when the command runs
    from budgettune.app.replay import ReplayConfig, ReplayResult
    from budgettune.loadgen.runner import RunProgress

LAG_WARN_MS = 5.0
LAUNCHABLE = [name for name in engine_names() if name != "external"]
RUN_PANEL = "Load generator"
SLO_PANEL = "SLOs (optional: a verdict on the console and in report.html)"


@app.command(cls=Command)
def replay(
    engine: str = typer.Option(
        "auto", "--engine", help=f"Engine to launch: auto (vLLM when installed and a GPU is "
        f"visible, else sim), {', '.join(LAUNCHABLE)}. --url measures your own server instead.",
        rich_help_panel=eo.PANEL,
    ),
    url: str | None = eo.URL,
    budget: str | None = typer.Option(
        None, "--budget", help="Token budget for the launched engine (vLLM "
        "--max-num-batched-tokens), e.g. 512 or 2k; 'none' = no chunking. Default: the "
        "engine's own.", rich_help_panel=eo.PANEL,
    ),
    model: str | None = typer.Option(
        None, "--model", help="Model to serve: a folder or Hugging Face id for vLLM/SGLang; for "
        "sim a preset or config.json (default llama-3.1-8b).", rich_help_panel=eo.PANEL,
    ),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU preset for the sim engine (default h100-sxm).",
        rich_help_panel=eo.PANEL,
    ),
    port: int | None = typer.Option(
        None, "--port", help="Port for the launched engine (default: a free one).",
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
    warmup: int = typer.Option(
        0, "--warmup", min=0, help="Leave the first N requests out of the statistics.",
        rich_help_panel=RUN_PANEL,
    ),
    merged_chunks: str = typer.Option(
        "spread", "--merged-chunks", help="A stream chunk carrying k > 1 tokens: spread its "
        "gap evenly over the k tokens, or first (one real gap, k - 1 zero gaps).",
        rich_help_panel=RUN_PANEL,
    ),
    max_error_rate: float | None = typer.Option(
        None, "--max-error-rate", help="Abort once more than this share (0-1) of finished "
        "requests failed (checked from 10 finished).", rich_help_panel=RUN_PANEL,
    ),
    request_timeout: str = typer.Option(
        "300s", "--request-timeout", help="Fail a request when its stream stalls this long.",
        rich_help_panel=RUN_PANEL,
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Folder for results.json, report.html and the engine log "
        "(default reports/replay-<date-time>).", rich_help_panel=RUN_PANEL,
    ),
    slo_tbt: str | None = typer.Option(
        None, "--slo-tbt", help="TBT target to judge the run against, e.g. 50ms (default: none, "
        "no verdict).", rich_help_panel=SLO_PANEL,
    ),
    slo_ttft: str | None = typer.Option(
        None, "--slo-ttft", help="TTFT target to judge the run against, e.g. 1s (default: none).",
        rich_help_panel=SLO_PANEL,
    ),
    percentile: float = typer.Option(
        99.0, "--percentile", help="Percentile the SLOs constrain (default 99).",
        rich_help_panel=SLO_PANEL,
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON document (a simulate point plus the self-check)."
    ),
) -> None:  # fmt: skip
    """Replay traffic on a live engine and measure TTFT, TBT, TPOT and E2E.

    Launches the engine for one budget (or measures --url), sends each request
    at its scheduled time with exact prompt and output lengths, and writes
    results.json with every request's raw token times.
    """
    from budgettune.app.replay import ReplayConfig
    from budgettune.loadgen.runner import MERGED_MODES, RunOptions

    slo_tbt_s = None if slo_tbt is None else parse_duration_s(slo_tbt, field="--slo-tbt")
    slo_ttft_s = None if slo_ttft is None else parse_duration_s(slo_ttft, field="--slo-ttft")
    slo = _slo(slo_tbt_s, slo_ttft_s, percentile)
    if merged_chunks not in MERGED_MODES:
        raise SpecError(f"--merged-chunks: unknown mode {merged_chunks!r}; use spread or first")
    engine_name, why = eo.resolve_auto_engine(engine, url, engine_cmd)
    if engine_name not in engine_names():
        raise SpecError(
            f"--engine: unknown engine {engine!r}; known: auto, {', '.join(engine_names())}"
        )
    if engine.strip().lower() == "auto" and url is None:
        console_err.print(why, highlight=False)
    if engine_name == "external":
        for option, value in (("--budget", budget), ("--port", port), ("--model", model)):
            if value is not None:
                raise SpecError(f"{option}: not with --url (the server is already configured)")
    elif engine_name != "sim" and not model:
        raise SpecError(f"--model: the {engine_name} engine needs a model (a folder or an id)")
    budget_tokens: int | None = None  # None with chunked: the engine's default budget
    chunked = True
    if budget is not None:
        budgets = parse_budgets(budget, option="--budget")
        if len(budgets) != 1:
            raise SpecError(f"--budget: one budget per replay, got {budget!r} (see `sweep`)")
        budget_tokens = budgets[0]
        chunked = budget_tokens is not None
    traffic = to.traffic_from_options(
        trace=trace, format=format, columns=columns, arrivals=arrivals, rate=rate,
        burstiness=burstiness, time_scale=time_scale, window=window, requests=requests,
        duration=duration, max_model_len=max_model_len, on_long=on_long, strict=strict,
        seed=seed, prompt_dist=prompt_dist, output_dist=output_dist, default_requests=200,
        on_warning=print_warning,
    )  # fmt: skip
    if warmup >= len(traffic.schedule):
        raise SpecError(f"--warmup: {warmup} leaves none of {len(traffic.schedule)} requests")
    out_dir = output or Path("reports") / _dt.datetime.now().strftime("replay-%Y%m%d-%H%M%S")
    label = "default" if budget is None else str(budget_tokens or "none")
    base = eo.launch_spec_from_options(
        engine=engine_name, model=model, gpu=gpu, max_num_seqs=max_num_seqs,
        max_model_len=max_model_len, engine_cmd=engine_cmd, env=env, engine_arg=engine_arg,
        dtype=dtype, tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization, prefix_caching=prefix_caching,
        health_timeout=health_timeout, url=url,
    )  # fmt: skip
    spec = dataclasses.replace(
        base,
        budget_tokens=budget_tokens,
        chunked_prefill=chunked,
        port=port,
        log_path=None if engine_name == "external" else out_dir / f"engine-{label}.log",
    )
    run = RunOptions(
        merged_chunks=merged_chunks,
        max_error_rate=max_error_rate,
        request_timeout_s=parse_duration_s(request_timeout, field="--request-timeout"),
        seed=seed,
        warmup_requests=warmup,
    )
    hardware = _hardware(engine_name, model, gpu)
    config = ReplayConfig(
        engine=engine_name,
        spec=spec,
        run=run,
        traffic=traffic.description,
        output_dir=out_dir,
        write_report=True,
        command=("budgettune", *sys.argv[1:]),
        config=dict(
            engine=engine_name, url=url, budget=budget_tokens, chunked_prefill=chunked,
            max_num_seqs=max_num_seqs, model=model, gpu=gpu, engine_cmd=engine_cmd,
            env=list(env), engine_args=list(spec.extra_args), dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            gpu_memory_utilization=gpu_memory_utilization, prefix_caching=prefix_caching,
            health_timeout_s=spec.health_timeout_s, trace=str(trace) if trace else None,
            format=format, arrivals=arrivals, rate=rate, burstiness=burstiness,
            time_scale=time_scale, window=window, requests=requests, duration=duration,
            max_model_len=max_model_len, on_long=on_long, seed=seed, prompt_dist=prompt_dist,
            output_dist=output_dist, warmup=warmup, merged_chunks=merged_chunks,
            max_error_rate=max_error_rate, request_timeout=request_timeout,
            slo_tbt_s=slo_tbt_s, slo_ttft_s=slo_ttft_s, percentile=percentile,
            python_version=platform.python_version(),
            trace_sha256=file_sha256(trace) if trace else None,
        ),
        hardware=hardware,
        rate_per_s=rate,
    )  # fmt: skip
    result = _run_with_progress(config, traffic.schedule, len(traffic.schedule))
    if as_json:
        print_json(result.to_json())
    else:
        _print_summary(result, traffic.description)
        if slo is not None:
            _print_verdict(result, slo, warmup)
    _finish(result)


def _slo(tbt_s: float | None, ttft_s: float | None, percentile: float) -> SLO | None:
    """The SLOs to judge by, when at least one was given. ``SLO`` needs both targets: the one
    not given is set to infinity, so it never fails."""
    if tbt_s is None and ttft_s is None:
        return None
    return SLO(
        tbt_s=math.inf if tbt_s is None else tbt_s,
        ttft_s=math.inf if ttft_s is None else ttft_s,
        percentile=percentile,
    )


def _print_verdict(result: ReplayResult, slo: SLO, warmup: int) -> None:
    """One line per SLO given, judged at its percentile from the raw records (pass or FAIL)."""
    records = [live.record for live in result.outcome.records]
    judged = slo.judge(
        summarize(records, warmup_requests=warmup, slo_quantile=slo.percentile / 100)
    )
    for name, value_s, limit_s, ok in (
        ("TBT", judged.tbt_s, slo.tbt_s, judged.tbt_ok),
        ("TTFT", judged.ttft_s, slo.ttft_s, judged.ttft_ok),
    ):
        if math.isinf(limit_s):
            continue
        shown = "failed requests" if math.isinf(value_s) else format_ms(value_s)
        mark = "[green]pass[/green]" if ok else "[bold red]FAIL[/bold red]"
        console.print(
            f"p{slo.percentile:g} {name} {shown} vs SLO {format_ms(limit_s)}: {mark}",
            highlight=False,
        )


def _hardware(engine: str, model: str | None, gpu: str | None) -> dict[str, Any] | None:
    """GPU and model facts known from the options (the sim engine's defaults when unset); an
    external server's hardware is unknown."""
    if engine == "external":
        return None
    if engine == "sim":
        model, gpu = model or "llama-3.1-8b", gpu or "h100-sxm"
    facts: dict[str, Any] = {}
    if gpu is not None:
        card = resolve_gpu(gpu)
        facts.update(
            gpu=card.name,
            peak_tflops=card.peak_flops / 1e12,
            bandwidth_tbs=card.bandwidth_bytes_per_s / 1e12,
            memory_gb=card.memory_bytes / 1e9,
        )
    if model is not None:
        facts["model"] = model
        try:
            shape = resolve_model(model)
            facts.update(model=shape.name, params=shape.params)
        except SpecError:
            pass  # a hub name the engine resolves itself: keep the name only
    return facts or None


def _run_with_progress(config: ReplayConfig, schedule: Any, total: int) -> ReplayResult:
    from budgettune.app.replay import run_replay

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console_err,
        transient=True,
        refresh_per_second=4,  # rendering holds the GIL: keep it rare beside the timing loop
    ) as progress:
        start_task = progress.add_task(f"starting {config.engine}", total=None)
        run_task = progress.add_task("replay", total=total, visible=False)

        def on_start(tick: StartProgress) -> None:
            last = tick.last_log_line.strip()[-70:]
            progress.update(
                start_task, description=f"{tick.engine} {tick.phase} {tick.elapsed_s:.0f}s {last}"
            )

        def on_ready(handle: EngineHandle) -> None:
            progress.update(start_task, visible=False)
            progress.update(run_task, visible=True)
            console_err.print(
                f"{handle.engine} {handle.version} ready at {handle.url} (model {handle.model}, "
                f"{handle.startup_s:.1f} s)", highlight=False,
            )  # fmt: skip

        def on_progress(tick: RunProgress) -> None:
            progress.update(
                run_task,
                completed=tick.finished,
                description=f"replay: {tick.sent} sent, {tick.failed} failed",
            )

        return asyncio.run(
            run_replay(
                config, schedule, on_start=on_start, on_ready=on_ready, on_progress=on_progress
            )
        )


def _ms_cell(value: float | None) -> str:
    return "-" if value is None else format_ms(value / 1e3)


def _lag_cell(value_ms: float | None) -> str:
    """A send lag: hundredths of a millisecond below 10 ms (it is often well under 1 ms)."""
    if value_ms is None or value_ms >= 10:
        return _ms_cell(value_ms)
    return f"{value_ms:.2f} ms"


def _print_summary(result: ReplayResult, traffic: str) -> None:
    doc = result.to_json()
    engine = result.engine
    console.print(
        f"{engine['name']} {engine['version']} at {engine['url']} (model {engine['model']}, "
        f"budget {engine.get('budget_tokens') or 'default'}); {traffic}",
        highlight=False,
    )
    table = Table(title="Latency (after warm-up)", box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("metric")
    for column in ("p50", "p90", "p99", "p99.9", "max"):
        table.add_column(column, justify="right")
    for name, key in (("TTFT", "ttft_ms"), ("TBT", "tbt_ms"), ("TPOT", "tpot_ms"),
                      ("E2E", "e2e_ms")):  # fmt: skip
        values = doc[key]
        table.add_row(name, *(_ms_cell(values[k]) for k in ("p50", "p90", "p99", "p999", "max")))
    console.print(table)
    throughput = doc["throughput_tokens_per_s"]
    console.print(
        f"completed {doc['completed']}, failed {doc['failed']}; output "
        f"{throughput or 0:,.0f} tokens/s",
        highlight=False,
    )
    for reason, count in result.failure_reasons.items():
        console.print(f"  [red]{count} failed:[/red] {reason}", highlight=False)
    check = doc["selfcheck"]
    lag = check["send_lag_ms"]
    target = check["target_rate_per_s"]
    achieved = check["achieved_rate_per_s"]
    console.print(
        f"load generator: sent {check['sent']}/{check['scheduled']}, rate "
        f"{achieved if achieved is not None else float('nan'):.2f}/s of "
        f"{target if target is not None else float('nan'):.2f}/s target; send lag p50 "
        f"{_lag_cell(lag['p50'])}, p99 {_lag_cell(lag['p99'])}, max {_lag_cell(lag['max'])}; "
        f"merged chunks {check['merged_chunks']} of {check['chunks']} "
        f"({check['merged_chunks_mode']})",
        highlight=False,
    )
    server = check.get("server") or {}
    if "ttft" in server or "itl" in server:
        parts = []
        for key, client_key, label in (("ttft", "ttft_ms", "TTFT"), ("itl", "tbt_ms", "ITL")):
            if key in server:
                s = server[key]
                parts.append(
                    f"{label} p50 {_ms_cell(s['p50_ms'])} / p99 {_ms_cell(s['p99_ms'])} "
                    f"(client {_ms_cell(doc[client_key]['p50'])} / "
                    f"{_ms_cell(doc[client_key]['p99'])})"
                )
        if "loop_lateness" in server:
            parts.append(f"engine loop lateness p99 {_ms_cell(server['loop_lateness']['p99_ms'])}")
        console.print("server /metrics (bucket estimates): " + "; ".join(parts), highlight=False)
    if result.results_file is not None:
        console.print(f"results: {result.results_file}", highlight=False)
    if result.report_file is not None:
        console.print(f"report: {result.report_file}", highlight=False)


def _finish(result: ReplayResult) -> None:
    """Warnings and the exit code: 130 when interrupted, 1 when aborted or the engine crashed."""
    check = result.outcome.selfcheck()
    lag_p99 = check["send_lag_ms"]["p99"]
    if lag_p99 is not None and lag_p99 > LAG_WARN_MS:
        timer_p99 = check["timer_lateness_ms"]["p99"] or 0.0
        print_warning(
            f"requests went out late (send lag p99 {lag_p99:.1f} ms, of which the timer itself "
            f"woke {timer_p99:.1f} ms late): this machine is busy"
        )
    lateness = (result.server.get("loop_lateness") or {}).get("p99_ms")
    if lateness is not None and lateness > LAG_WARN_MS:
        print_warning(
            f"the sim engine ended iterations late (p99 {lateness:.1f} ms): this machine is "
            "busy; its latencies include that delay"
        )
    if check["merged_chunks_warning"]:
        print_warning(
            f"{check['merged_chunk_share']:.1%} of stream chunks carried more than one token "
            f"({check['merged_chunks_mode']} applied); TBT percentiles depend on that choice"
        )
    if result.engine_crashed:
        console_err.print(f"[bold red]error:[/bold red] {result.engine_crashed}", highlight=False)
        tail = result.engine.get("log_tail") or ""
        for line in tail.splitlines()[-10:]:
            console_err.print(f"    {line}", markup=False, highlight=False)
        raise typer.Exit(1)
    reason = result.outcome.stop_reason
    if reason is None:
        return
    if reason.startswith("interrupted"):
        console_err.print(f"[yellow]{reason}[/yellow]", highlight=False)
        raise typer.Exit(130)
    console_err.print(f"[bold red]error:[/bold red] {reason}", highlight=False)
    raise typer.Exit(1)
