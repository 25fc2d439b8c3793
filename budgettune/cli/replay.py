"""`budgettune replay`: replay traffic against one engine (launched for one budget, or --url) and
show TTFT/TBT/TPOT/E2E percentiles, failures and the load generator's self-check."""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from budgettune.app.requests import (
    ClientRequest,
    LaunchRequest,
    ReplayRequest,
    SloRequest,
    TrafficRequest,
)
from budgettune.cli import Command, app
from budgettune.cli import _engine_options as eo
from budgettune.cli._client_options import CLIENT
from budgettune.cli._common import (
    PERCENTILE_HELP,
    console,
    console_err,
    print_json,
    print_warning,
)
from budgettune.cli._groups import with_groups
from budgettune.cli._trace_options import TRAFFIC
from budgettune.core.units import finite_or_none, format_ms

if TYPE_CHECKING:  # the live runner and the replay pipeline load when the command runs
    from budgettune.app.replay import ReplayConfig, ReplayResult
    from budgettune.core.slo import SLO
    from budgettune.engines.base import EngineHandle, StartProgress
    from budgettune.loadgen.runner import RunProgress

LAUNCHABLE = [name for name in eo.ENGINE_NAMES if name != "external"]
RUN_PANEL = "Load generator"
SLO_PANEL = "SLOs (optional: a verdict on the console and in report.html)"

Engine = Annotated[str, typer.Option(
    "--engine", help=f"Engine to launch: auto (vLLM when installed and a GPU is visible, else "
    f"sim), {', '.join(LAUNCHABLE)}. --url measures your own server instead.",
    rich_help_panel=eo.PANEL,
)]  # fmt: skip
Budget = Annotated[str | None, typer.Option(
    "--budget", help="Token budget for the launched engine (vLLM --max-num-batched-tokens), "
    "e.g. 512 or 2k; 'none' = no chunking. Default: the engine's own.", rich_help_panel=eo.PANEL,
)]  # fmt: skip
Port = Annotated[int | None, typer.Option(
    "--port", help="Port for the launched engine (default: a free one).", rich_help_panel=eo.PANEL,
)]  # fmt: skip
MergedChunks = Annotated[str, typer.Option(
    "--merged-chunks", help="A stream chunk carrying k > 1 tokens: spread its gap evenly over "
    "the k tokens, or first (one real gap, k - 1 zero gaps).", rich_help_panel=RUN_PANEL,
)]  # fmt: skip
MaxErrorRate = Annotated[float | None, typer.Option(
    "--max-error-rate", help="Abort once more than this share (0-1) of finished requests "
    "failed (checked from 10 finished).", rich_help_panel=RUN_PANEL,
)]  # fmt: skip
Output = Annotated[Path | None, typer.Option(
    "--output", "-o", help="Folder for results.json, report.html and the engine log (default "
    "reports/replay-<date-time>).", rich_help_panel=RUN_PANEL,
)]  # fmt: skip
SloTbt = Annotated[str | None, typer.Option(
    "--slo-tbt", "--slo-itl", help="TBT (ITL, inter-token latency) target to judge the run "
    "against, e.g. 50ms (default: none, no verdict).", rich_help_panel=SLO_PANEL,
)]  # fmt: skip
SloTtft = Annotated[str | None, typer.Option(
    "--slo-ttft", help="TTFT target to judge the run against, e.g. 1s (default: none).",
    rich_help_panel=SLO_PANEL,
)]  # fmt: skip
Percentile = Annotated[float, typer.Option(
    "--percentile", help=PERCENTILE_HELP, rich_help_panel=SLO_PANEL,
)]  # fmt: skip
AsJson = Annotated[bool, typer.Option(
    "--json", help="Print one JSON document (a simulate point plus the self-check)."
)]  # fmt: skip


@app.command(cls=Command)
@with_groups(launch=eo.LAUNCH.worded(engine=Engine), traffic=TRAFFIC, client=CLIENT)
def replay(
    slo_tbt: SloTbt = None,
    slo_ttft: SloTtft = None,
    percentile: Percentile = 99.0,
    launch: LaunchRequest = LaunchRequest(),  # the eo.LAUNCH options, packed by with_groups
    budget: Budget = None,
    port: Port = None,
    traffic: TrafficRequest = TrafficRequest(),  # the TRAFFIC options, likewise
    client: ClientRequest = ClientRequest(),  # the CLIENT options, likewise
    merged_chunks: MergedChunks = "spread",
    max_error_rate: MaxErrorRate = None,
    output: Output = None,
    as_json: AsJson = False,
) -> None:
    """Replay traffic on a live engine and measure TTFT, TBT (ITL), TPOT and E2E.

    Launches the engine for one budget (or measures --url), sends each request
    at its scheduled time (or keeps --concurrency N in flight) with exact prompt
    and output lengths, and writes results.json with every request's raw token
    times.
    """
    from budgettune.app.replay_setup import prepare_replay

    request = ReplayRequest(
        budget=budget, port=port, launch=launch, traffic=traffic, merged_chunks=merged_chunks,
        max_error_rate=max_error_rate, output=output,
        slo=SloRequest(slo_tbt, slo_ttft, percentile), client=client,
    )  # fmt: skip
    prepared = prepare_replay(
        request,
        command=("budgettune", *sys.argv[1:]),
        say=lambda line: console_err.print(line, highlight=False),
        warn=print_warning,
    )
    schedule = prepared.traffic.schedule
    result = _run_with_progress(prepared.config, schedule, len(schedule))
    if as_json:
        print_json(result.to_json())
    else:
        _print_summary(result, prepared.config.traffic)
        if prepared.slo is not None:
            _print_verdict(result, prepared.slo, client.warmup)
    _finish(result)


def _print_verdict(result: ReplayResult, slo: SLO, warmup: int) -> None:
    """One line per SLO given, judged at its percentile from the raw records (pass or FAIL)."""
    from budgettune.core.metrics import summarize

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
        shown = "failed requests" if math.isinf(value_s) else format_ms(value_s * 1e3)
        mark = "[green]pass[/green]" if ok else "[bold red]FAIL[/bold red]"
        console.print(
            f"p{slo.percentile:g} {name} {shown} vs SLO {format_ms(limit_s * 1e3)}: {mark}",
            highlight=False,
        )


def _run_with_progress(config: ReplayConfig, schedule: Any, total: int) -> ReplayResult:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

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


def _lag_cell(value_ms: float | None) -> str:
    """A send lag: hundredths of a millisecond below 10 ms (it is often well under 1 ms)."""
    if value_ms is None or value_ms >= 10:
        return format_ms(value_ms)
    return f"{value_ms:.2f} ms"


def _print_summary(result: ReplayResult, traffic: str) -> None:
    from rich import box
    from rich.table import Table

    summary = result.summary
    engine = result.engine
    console.print(
        f"{engine.name} {engine.version} at {engine.url} (model {engine.model}, "
        f"budget {engine.budget_tokens or 'default'}); {traffic}",
        highlight=False,
    )
    table = Table(title="Latency (after warm-up)", box=box.SIMPLE_HEAD, padding=(0, 1))
    table.add_column("metric")
    for column in ("p50", "p90", "p99", "p99.9", "max"):
        table.add_column(column, justify="right")
    for name, values in (("TTFT", summary.ttft_s), ("TBT (ITL)", summary.tbt_s),
                         ("TPOT", summary.tpot_s), ("E2E", summary.e2e_s)):  # fmt: skip
        table.add_row(name, *(format_ms(v * 1e3) for v in (values.p50, values.p90, values.p99,
                                                            values.p999, values.max)))  # fmt: skip
    console.print(table)
    throughput = finite_or_none(summary.throughput_tokens_per_s)
    console.print(
        f"completed {summary.completed}, failed {summary.failed}; output "
        f"{throughput or 0:,.0f} tokens/s",
        highlight=False,
    )
    for reason, count in result.failure_reasons.items():
        console.print(f"  [red]{count} failed:[/red] {reason}", highlight=False)
    check = result.outcome.selfcheck()
    lag = check.send_lag
    target = check.target_rate_per_s
    achieved = check.achieved_rate_per_s
    achieved_text = f"{achieved if achieved is not None else float('nan'):.2f}/s"
    rate = (
        f"rate {achieved_text} of {target if target is not None else float('nan'):.2f}/s target"
        if check.concurrency is None
        else f"closed loop, {check.concurrency} in flight, {achieved_text} sent"
    )
    console.print(
        f"load generator: sent {check.sent}/{check.scheduled}, {rate}; send lag p50 "
        f"{_lag_cell(lag.p50_ms)}, p99 {_lag_cell(lag.p99_ms)}, max {_lag_cell(lag.max_ms)}; "
        f"merged chunks {check.merged_chunks} of {check.chunks} "
        f"({check.merged_chunks_mode})",
        highlight=False,
    )
    from budgettune.loadgen.selfcheck import prompts_text  # loaded by the replay already

    prompts = prompts_text(check.prompt_form, check.prompt_tokens_checked, check.prompt_tokens_off)
    console.print(f"prompts: {prompts}", highlight=False)
    server = result.server
    if server.ttft is not None or server.itl is not None:
        parts = []
        for figure, client, label in ((server.ttft, summary.ttft_s, "TTFT"),
                                      (server.itl, summary.tbt_s, "ITL")):  # fmt: skip
            if figure is not None:
                parts.append(
                    f"{label} p50 {format_ms(figure.p50_ms)} / "
                    f"p99 {format_ms(figure.p99_ms)} "
                    f"(client {format_ms(client.p50 * 1e3)} / {format_ms(client.p99 * 1e3)})"
                )
        if server.loop_lateness is not None:
            parts.append(f"engine loop lateness p99 {format_ms(server.loop_lateness.p99_ms)}")
        console.print("server /metrics (bucket estimates): " + "; ".join(parts), highlight=False)
    from budgettune.core.cache_count import PrefixCacheCount

    cache = PrefixCacheCount.from_counters(server.counters)
    if cache is not None and cache.hit_share is not None:
        console.print(
            f"prefix cache (the server's counters): {cache.hit_share:.1%} of prompt tokens hit "
            f"({cache.hits_tokens:,} of {cache.queries_tokens:,})",
            highlight=False,
        )
    if result.results_file is not None:
        console.print(f"results: {result.results_file}", highlight=False)
    if result.report_file is not None:
        console.print(f"report: {result.report_file}", highlight=False)


def _finish(result: ReplayResult) -> None:
    """Warnings and the exit code: 130 when interrupted, 1 when aborted or the engine crashed."""
    from budgettune.loadgen.selfcheck import LAG_WARN_MS

    check = result.outcome.selfcheck()
    for warning in check.health_warnings():
        print_warning(warning)
    prompt_warning = check.prompt_length_warning()
    if prompt_warning is not None:
        print_warning(prompt_warning)
    loop = result.server.loop_lateness
    lateness = loop.p99_ms if loop is not None else None
    if lateness is not None and lateness > LAG_WARN_MS:  # the same bound as the client's
        print_warning(
            f"the sim engine ended iterations late (p99 {lateness:.1f} ms): this machine is "
            "busy; its latencies include that delay"
        )
    if check.merged_chunks_warning:
        unplaced = (
            ""
            if result.outcome.continuous_usage
            else "; without --continuous-usage-stats a chunk counts one token and the final "
            "usage puts the rest on the last chunk: ask for it to count each chunk exactly"
        )
        print_warning(
            f"{check.merged_chunk_share:.1%} of stream chunks carried more than one token "
            f"({check.merged_chunks_mode} applied); TBT percentiles depend on that choice"
            f"{unplaced}"
        )
    if result.save_error is not None:  # measured, printed above, but not saved
        raise result.save_error
    if result.engine_crashed:
        console_err.print(f"[bold red]error:[/bold red] {result.engine_crashed}", highlight=False)
        tail = result.engine.log_tail or ""
        for line in tail.splitlines()[-10:]:
            console_err.print(f"    {line}", markup=False, highlight=False)
        raise typer.Exit(1)
    from budgettune.loadgen.runner import StopReason  # loaded by the replay already

    reason = result.outcome.stop_reason
    interrupted = result.outcome.stopped_by is StopReason.INTERRUPTED
    summary = result.summary
    if summary.completed == 0 and summary.failed > 0 and not interrupted:
        # a run that measured nothing is no success, whatever else stopped it
        why = "; ".join(f"{count}: {text}" for text, count in result.failure_reasons.items())
        console_err.print(
            f"[bold red]error:[/bold red] no request completed: all {summary.failed} failed "
            f"({why}); results.json keeps them",
            highlight=False,
        )
        raise typer.Exit(1)
    if reason is None:
        return
    if interrupted:
        console_err.print(f"[yellow]{reason}[/yellow]", highlight=False)
        raise typer.Exit(130)
    console_err.print(f"[bold red]error:[/bold red] {reason}", highlight=False)
    raise typer.Exit(1)
