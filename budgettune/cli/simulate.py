"""`budgettune simulate`: latency percentiles per token budget from the built-in simulator, on
synthetic traffic or a replayed trace, optionally each budget's goodput under p99 TBT/TTFT SLOs,
and with -o a results.json and an HTML report."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from budgettune.app.requests import (
    DEFAULT_OUTPUT_DIST as SWEEP_OUTPUT_DIST,
)
from budgettune.app.requests import (
    DEFAULT_PROMPT_DIST,
    SIMULATE_BUDGETS,
    SIMULATE_OUTPUT_DIST,
    SIMULATE_RATE_PER_S,
    SIMULATE_REQUESTS,
    SWEEP_RATE_PER_S,
    SWEEP_REQUESTS,
    ModelRequest,
    SimulateRequest,
    SloRequest,
    TrafficRequest,
)
from budgettune.cli import Command, app
from budgettune.cli import _model_options as mo
from budgettune.cli import _trace_options as to
from budgettune.cli._common import console, console_err, print_json, print_warning
from budgettune.cli._groups import with_groups
from budgettune.core.units import format_ms
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION

if TYPE_CHECKING:  # rich's tables and progress load when the command prints them
    from rich.table import Table

    from budgettune.app.simulate import Budget, SimulateReport
    from budgettune.core.slo import SLO
    from budgettune.tune.goodput import RateProbe

# simulate's own synthetic defaults (issue 2), stated in its help and applied by the app
DEFAULT_RATE_PER_S = SIMULATE_RATE_PER_S
DEFAULT_REQUESTS = SIMULATE_REQUESTS
DEFAULT_OUTPUT_DIST = SIMULATE_OUTPUT_DIST


_HELP = (
    "Simulate the token-budget scheduler on synthetic traffic or a trace and compare budgets.\n\n"
    "For each budget: TTFT, TBT (every gap between two tokens), TPOT and E2E percentiles and "
    "output throughput, from the roofline step-time model in virtual time. Failed requests "
    "(too long for the KV cache) count as SLO violations. With --goodput, each budget's "
    f"highest rate meeting the p99 SLOs. Without --trace: {DEFAULT_REQUESTS} requests, Poisson "
    f"arrivals at {DEFAULT_RATE_PER_S:g} requests/s, lengths from --prompt-dist and "
    "--output-dist. With --trace FILE: its requests at their recorded times (or --arrivals "
    f"poisson/gamma --rate R). These defaults are heavier than sweep's ({SWEEP_RATE_PER_S:g} "
    f"requests/s, {SWEEP_REQUESTS} requests, --output-dist {SWEEP_OUTPUT_DIST}): a simulation "
    "runs in virtual time, where a longer run costs nothing, while sweep replays each budget "
    "live."
)

# The traffic options, four of them worded for simulate's own defaults.
TRAFFIC = to.TRAFFIC.worded(
    arrivals=Annotated[str | None, typer.Option(
        "--arrivals", help="Arrival process: poisson (default without --trace) or gamma (see "
        "--burstiness); with --trace also recorded (its own times, the default when it has "
        "them).", rich_help_panel=to.PANEL,
    )],
    rate=Annotated[float | None, typer.Option(
        "--rate", help=f"Mean arrival rate, requests/s (default {DEFAULT_RATE_PER_S:g} without "
        "--trace; with a recorded trace its own rate, or rescaled to this).",
        rich_help_panel=to.PANEL,
    )],
    requests=Annotated[int | None, typer.Option(
        "--requests", help=f"Requests to simulate, count (default {DEFAULT_REQUESTS} without "
        "--trace; with one, all its requests, or the first N).", rich_help_panel=to.PANEL,
    )],
    output_dist=Annotated[str | None, typer.Option(
        "--output-dist", help="Output length distribution without a trace, tokens: "
        "lognormal:mean=M,sigma=S[,min=A][,max=B] (mean of the lengths), fixed:N or "
        f"uniform:min=A,max=B (default {DEFAULT_OUTPUT_DIST}).", rich_help_panel=to.PANEL,
    )],
)  # fmt: skip

Budgets = Annotated[str, typer.Option(
    "--budgets", help="Comma-separated token budgets per iteration (vLLM "
    "--max-num-batched-tokens), tokens; 'none' = no chunking (whole prompts first, no decodes "
    "beside them).",
)]  # fmt: skip
MaxNumSeqs = Annotated[int, typer.Option(
    "--max-num-seqs", help="Most running sequences (vLLM --max-num-seqs), count."
)]  # fmt: skip
GpuMemoryUtilization = Annotated[float, typer.Option(
    "--gpu-memory-utilization", help="Share of GPU memory for weights and KV cache, 0-1; the KV "
    "cache gets the rest after the weights.",
)]  # fmt: skip
BlockSize = Annotated[int, typer.Option("--block-size", help="KV-cache block size, tokens.")]
BlockAligned = Annotated[bool, typer.Option(
    "--block-aligned", help="Cut chunks that do not finish a prompt to whole KV blocks (vLLM "
    "with prefix caching).",
)]  # fmt: skip
PrefixCaching = Annotated[str, typer.Option(
    "--prefix-caching", help="engine (default: on, as vLLM V1 and the built-in engine), on or "
    "off: requests that start with the same full KV blocks (a trace's shared prefixes) skip "
    "their prefill while those blocks stay cached.",
)]  # fmt: skip
LongPrefillTokenThreshold = Annotated[int, typer.Option(
    "--long-prefill-token-threshold",
    help="Most prompt tokens one request takes per iteration, tokens; 0 = off.",
)]  # fmt: skip
Warmup = Annotated[int, typer.Option(
    "--warmup", help="Leave the first N requests out of the metrics (count)."
)]  # fmt: skip
Goodput = Annotated[bool, typer.Option(
    "--goodput", help="Also search each budget's goodput: the highest rate (requests/s, to 2%) "
    "whose p99 TBT and p99 TTFT meet --slo-tbt and --slo-ttft, starting from --rate (a trace: "
    "rescaled or redrawn at each rate tried).",
)]  # fmt: skip
SloTbt = Annotated[str, typer.Option(
    "--slo-tbt", "--slo-itl",
    help="p99 time-between-tokens (TBT, ITL) target for --goodput and the -o report (e.g. 50ms).",
)]  # fmt: skip
SloTtft = Annotated[str, typer.Option(
    "--slo-ttft", help="p99 time-to-first-token target for --goodput and the -o report (e.g. 1s).",
)]  # fmt: skip
Output = Annotated[Path | None, typer.Option(
    "--output", "-o", help="Folder to write results.json (every option, every point, "
    "per-request TTFT/E2E and a TBT sample) and report.html into; nothing is written without it.",
)]  # fmt: skip
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON document, no tables.")]


@app.command(cls=Command, help=_HELP)
@with_groups(model=mo.MODEL, traffic=TRAFFIC)
def simulate(
    model: ModelRequest = mo.DEFAULTS,
    profile: mo.Profile = None,
    budgets: Budgets = SIMULATE_BUDGETS,
    traffic: TrafficRequest = to.DEFAULTS,
    max_num_seqs: MaxNumSeqs = 256,
    gpu_memory_utilization: GpuMemoryUtilization = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: BlockSize = DEFAULT_BLOCK_SIZE,
    block_aligned: BlockAligned = False,
    prefix_caching: PrefixCaching = "engine",
    long_prefill_token_threshold: LongPrefillTokenThreshold = 0,
    warmup: Warmup = 0,
    goodput: Goodput = False,
    slo_tbt: SloTbt = "50ms",
    slo_ttft: SloTtft = "1s",
    output: Output = None,
    as_json: AsJson = False,
) -> None:
    """`budgettune simulate` (help text in _HELP: typer keeps a docstring's line breaks)."""
    from budgettune.app.simulate_setup import prepare_simulation, write_simulation

    request = SimulateRequest(
        model=model, profile=profile, budgets=budgets, traffic=traffic,
        max_num_seqs=max_num_seqs, gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size, block_aligned=block_aligned,
        long_prefill_token_threshold=long_prefill_token_threshold, warmup=warmup,
        goodput=goodput, slo=SloRequest(slo_tbt, slo_ttft), output=output,
        prefix_caching=prefix_caching,
    )  # fmt: skip
    prepared = prepare_simulation(request, warn=print_warning)
    report = prepared.run() if prepared.slo is None else _with_progress(prepared.run)
    if output is not None:
        write_simulation(
            prepared,
            report,
            output,
            command=("budgettune", *sys.argv[1:]),
            as_json=as_json,
        )
    if as_json:
        print_json(report.to_json())
        return
    step_model, start_rate = prepared.step_model, prepared.start_rate_per_s
    console.print(
        f"{prepared.model_label}; {prepared.ridge_label.format(step_model.ridge_tokens)}; "
        f"KV cache {prepared.capacity_blocks:,} blocks of {block_size} tokens",
        highlight=False,
    )
    built = prepared.traffic
    arrivals, seed = traffic.arrivals, traffic.seed
    if built.report is None:
        console.print(
            f"{len(built.schedule)} requests at {start_rate:g} req/s ({arrivals or 'poisson'}, "
            f"seed {seed}); prompts {_spec(traffic.prompt_dist or DEFAULT_PROMPT_DIST)}; "
            f"outputs {_spec(traffic.output_dist or DEFAULT_OUTPUT_DIST)}",
            highlight=False,
        )
    else:
        console.print(
            f"trace {built.report.path}: {built.report.summary()}\n"
            f"{built.description}, mean {start_rate:.3g} req/s"
            + (f", seed {seed}" if arrivals in ("poisson", "gamma") else ""),
            highlight=False,
        )
    console.print(_table(report, prepared.slo, step_model.ridge_tokens))
    if output is not None:
        console.print(f"results: {output / 'results.json'}; report: {output / 'report.html'}")


def _spec(text: str) -> str:
    from budgettune.trace.dists import parse_length_dist

    return parse_length_dist(text).spec


def _with_progress(
    run: Callable[[Callable[[Budget, RateProbe], None]], SimulateReport],
) -> SimulateReport:
    """Run the goodput search under a progress display on stderr."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from budgettune.app.simulate import budget_label

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console_err,
        transient=True,
    ) as progress:
        task = progress.add_task("goodput search", total=None)

        def on_probe(budget: Budget, probe: RateProbe) -> None:
            verdict = "meets" if probe.met else "misses"
            progress.update(
                task,
                description=f"goodput, budget {budget_label(budget)}: "
                f"{probe.rate_per_s:.2f} req/s {verdict} the SLOs",
            )

        result: SimulateReport = run(on_probe)
    return result


def _table(report: SimulateReport, slo: SLO | None, ridge_tokens: float) -> Table:
    from rich import box
    from rich.table import Table

    from budgettune.app.simulate import budget_label

    table = Table(
        title="Simulated latency per token budget (ms unless marked)",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
    )
    columns = [
        "budget",
        "TTFT\np50",
        "TTFT\np99",
        "TBT\np50",
        "TBT\np99",
        "TBT\nmax",
        "TPOT\np50",
        "E2E\np99 s",
        "tokens\n/s",
    ]
    # Columns that are all zero in the common case appear only when they have something to say.
    show_failed = any(p.summary.failed for p in report.points)
    show_preempt = any(p.preemptions for p in report.points)
    # The cache's share only when something was found cached (traffic with shared prefixes).
    show_hits = any(p.prefix_cache and p.prefix_cache.hits_tokens for p in report.points)
    if show_failed:
        columns.append("failed")
    if show_preempt:
        columns.append("pre-\nempt")
    if show_hits:
        columns.append("cache\nhits")
    if report.goodput is not None:
        columns.append("goodput\nreq/s")
    for column in columns:
        table.add_column(column, justify="right", no_wrap=True)
    goodput = {g.budget_tokens: g.result for g in report.goodput or ()}
    for point in report.points:
        s = point.summary
        label = budget_label(point.budget_tokens)
        if point.budget_tokens is not None and point.budget_tokens < ridge_tokens:
            label = f"[red]{label}*[/red]"  # below the ridge: memory-bound chunks
        row = [
            label,
            _cell_against(s.ttft_s.p50),
            _cell_against(s.ttft_s.p99, slo.ttft_s if slo else None),
            _cell_against(s.tbt_s.p50),
            _cell_against(s.tbt_s.p99, slo.tbt_s if slo else None),
            _cell_against(s.tbt_s.max),
            _cell_against(s.tpot_s.p50),
            f"{s.e2e_s.p99:.1f}" if math.isfinite(s.e2e_s.p99) else "-",
            f"{s.throughput_tokens_per_s:,.0f}",
        ]
        if show_failed:
            row.append(str(s.failed))
        if show_preempt:
            row.append(str(point.preemptions))
        if show_hits:
            share = point.prefix_cache.hit_share if point.prefix_cache else None
            row.append("-" if share is None else f"{share:.1%}")
        if report.goodput is not None:
            result = goodput[point.budget_tokens]
            row.append(f"{result.rate_per_s:.2f}" + ("+" if result.capped else ""))
        table.add_row(*row)
    if any(p.budget_tokens is not None and p.budget_tokens < ridge_tokens for p in report.points):
        table.caption = f"* below the ridge P* = {ridge_tokens:.0f} tokens"
    return table


def _cell_against(seconds: float, target_s: float | None = None) -> str:
    """A table cell in milliseconds (the one duration format); green/red against a target when
    given."""
    if not math.isfinite(seconds):
        return "-"
    text = format_ms(seconds * 1e3, unit=False)
    if target_s is None:
        return text
    colour = "green" if seconds <= target_s else "red"
    return f"[{colour}]{text}[/{colour}]"
