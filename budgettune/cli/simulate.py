"""`budgettune simulate`: latency percentiles per token budget from the built-in simulator, and
optionally each budget's goodput under p99 TBT/TTFT SLOs."""

from __future__ import annotations

import math
from collections.abc import Callable

import typer
from rich import box
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from budgettune.cli import _model_options as mo
from budgettune.cli import app
from budgettune.cli._common import console, console_err, print_json
from budgettune.errors import SpecError
from budgettune.pipeline.simulate import (
    DEFAULT_BUDGETS,
    Budget,
    SimulateReport,
    budget_label,
    parse_budgets,
    run_simulate,
)
from budgettune.search import SLO, RateProbe
from budgettune.sim.kvcache import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    kv_capacity_blocks,
)
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.schedule import Schedule, synthetic_schedule
from budgettune.units import parse_duration_s

DEFAULT_PROMPT_DIST = "lognormal:mean=1000,sigma=1.0,max=8192"
DEFAULT_OUTPUT_DIST = "lognormal:mean=250,sigma=1.0,max=4096"


_HELP = (
    "Simulate the token-budget scheduler on synthetic traffic and compare budgets.\n\n"
    "For each budget: TTFT, TBT (every gap between two tokens), TPOT and E2E percentiles and "
    "output throughput, from the roofline step-time model in virtual time. Failed requests "
    "(too long for the KV cache) count as SLO violations. With --goodput, each budget's "
    "highest rate meeting the p99 SLOs."
)


@app.command(help=_HELP)
def simulate(
    model: str = mo.MODEL,
    gpu: str = mo.GPU_NAME,
    peak_tflops: float | None = mo.PEAK_TFLOPS,
    bandwidth_tbs: float | None = mo.BANDWIDTH_TBS,
    memory_gb: float | None = mo.MEMORY_GB,
    dtype: str = mo.DTYPE,
    tensor_parallel: int = mo.TENSOR_PARALLEL,
    compute_efficiency: float = mo.COMPUTE_EFFICIENCY,
    bandwidth_efficiency: float = mo.BANDWIDTH_EFFICIENCY,
    overhead_ms: float = mo.OVERHEAD_MS,
    mode: str = mo.MODE,
    budgets: str = typer.Option(
        DEFAULT_BUDGETS,
        "--budgets",
        help="Comma-separated token budgets per iteration (vLLM --max-num-batched-tokens), "
        "tokens; 'none' = no chunking (whole prompts first, no decodes beside them).",
    ),
    rate: float = typer.Option(16.0, "--rate", help="Mean arrival rate, requests/s."),
    requests: int = typer.Option(2000, "--requests", help="Requests to simulate (count)."),
    prompt_dist: str = typer.Option(
        DEFAULT_PROMPT_DIST,
        "--prompt-dist",
        help="Prompt length distribution, tokens: lognormal:mean=M,sigma=S[,min=A][,max=B] "
        "(mean of the lengths), fixed:N or uniform:min=A,max=B.",
    ),
    output_dist: str = typer.Option(
        DEFAULT_OUTPUT_DIST,
        "--output-dist",
        help="Output length distribution, tokens (same forms as --prompt-dist).",
    ),
    arrivals: str = typer.Option(
        "poisson", "--arrivals", help="Arrival process: poisson or gamma (see --burstiness)."
    ),
    burstiness: float = typer.Option(
        1.0,
        "--burstiness",
        help="Gamma arrivals' shape: 1 = Poisson, below 1 burstier, above 1 more regular.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of arrivals and lengths (integer)."),
    max_num_seqs: int = typer.Option(
        256, "--max-num-seqs", help="Most running sequences (vLLM --max-num-seqs), count."
    ),
    gpu_memory_utilization: float = typer.Option(
        DEFAULT_GPU_MEMORY_UTILIZATION,
        "--gpu-memory-utilization",
        help="Share of GPU memory for weights and KV cache, 0-1; the KV cache gets the rest "
        "after the weights.",
    ),
    block_size: int = typer.Option(
        DEFAULT_BLOCK_SIZE, "--block-size", help="KV-cache block size, tokens."
    ),
    block_aligned: bool = typer.Option(
        False,
        "--block-aligned",
        help="Cut chunks that do not finish a prompt to whole KV blocks (vLLM with prefix "
        "caching).",
    ),
    long_prefill_token_threshold: int = typer.Option(
        0,
        "--long-prefill-token-threshold",
        help="Most prompt tokens one request takes per iteration, tokens; 0 = off.",
    ),
    warmup: int = typer.Option(
        0, "--warmup", help="Leave the first N requests out of the metrics (count)."
    ),
    goodput: bool = typer.Option(
        False,
        "--goodput",
        help="Also search each budget's goodput: the highest rate (requests/s, to 2%) whose "
        "p99 TBT and p99 TTFT meet --slo-tbt and --slo-ttft, starting from --rate.",
    ),
    slo_tbt: str = typer.Option(
        "50ms", "--slo-tbt", help="p99 time-between-tokens target for --goodput (e.g. 50ms)."
    ),
    slo_ttft: str = typer.Option(
        "1s", "--slo-ttft", help="p99 time-to-first-token target for --goodput (e.g. 1s)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document, no tables."),
) -> None:
    """`budgettune simulate` (help text in _HELP: typer keeps a docstring's line breaks)."""
    budget_list = parse_budgets(budgets)
    prompt = parse_length_dist(prompt_dist, option="--prompt-dist")
    output = parse_length_dist(output_dist, option="--output-dist")
    # Parsed even without --goodput, so a typo never passes silently.
    targets = SLO(
        parse_duration_s(slo_tbt, option="--slo-tbt"),
        parse_duration_s(slo_ttft, option="--slo-ttft"),
    )
    slo = targets if goodput else None
    for option, value in (("--rate", rate), ("--burstiness", burstiness)):
        if not (math.isfinite(value) and value > 0):
            raise SpecError(f"{option}: must be a positive number, got {value!r}")
    if requests <= 0:
        raise SpecError(f"--requests: must be positive, got {requests}")
    if arrivals not in ("poisson", "gamma"):
        raise SpecError(f"--arrivals: unknown arrival process {arrivals!r}; use poisson or gamma")
    gpu_spec = mo.gpu_from_options(gpu, peak_tflops, bandwidth_tbs, memory_gb)
    step_model = mo.step_model_from_options(
        model=model,
        gpu=gpu_spec,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
        overhead_ms=overhead_ms,
        mode=mode,
    )
    capacity = kv_capacity_blocks(
        step_model,
        gpu_spec,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        tensor_parallel=tensor_parallel,
    )
    scheduler = SchedulerConfig(
        budget_tokens=None,
        kv_capacity_blocks=capacity,
        max_num_seqs=max_num_seqs,
        block_size=block_size,
        block_aligned_chunks=block_aligned,
        long_prefill_token_threshold=long_prefill_token_threshold,
    )

    def schedule_at(rate_per_s: float) -> Schedule:
        return synthetic_schedule(
            prompt_dist=prompt,
            output_dist=output,
            rate_per_s=rate_per_s,
            requests=requests,
            seed=seed,
            process=arrivals,
            burstiness=burstiness,
        )

    if slo is None:
        report = run_simulate(
            step_model=step_model,
            scheduler=scheduler,
            budgets=budget_list,
            schedule_at=schedule_at,
            rate_per_s=rate,
            warmup_requests=warmup,
        )
    else:
        report = _with_progress(
            lambda on_probe: run_simulate(
                step_model=step_model,
                scheduler=scheduler,
                budgets=budget_list,
                schedule_at=schedule_at,
                rate_per_s=rate,
                warmup_requests=warmup,
                slo=slo,
                on_probe=on_probe,
            )
        )
    if as_json:
        print_json(report.to_json())
        return
    console.print(
        f"{model} on {gpu_spec.name} ({mode}); ridge P* = {step_model.ridge_tokens:.0f} "
        f"tokens; KV cache {capacity:,} blocks of {block_size} tokens",
        highlight=False,
    )
    console.print(
        f"{requests} requests at {rate:g} req/s ({arrivals}, seed {seed}); "
        f"prompts {prompt.spec}; outputs {output.spec}",
        highlight=False,
    )
    console.print(_table(report, slo, step_model.ridge_tokens))


def _with_progress(
    run: Callable[[Callable[[Budget, RateProbe], None]], SimulateReport],
) -> SimulateReport:
    """Run the goodput search under a progress display on stderr."""
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
    if show_failed:
        columns.append("failed")
    if show_preempt:
        columns.append("pre-\nempt")
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
            _ms(s.ttft_s.p50),
            _ms(s.ttft_s.p99, slo.ttft_s if slo else None),
            _ms(s.tbt_s.p50),
            _ms(s.tbt_s.p99, slo.tbt_s if slo else None),
            _ms(s.tbt_s.max),
            _ms(s.tpot_s.p50),
            f"{s.e2e_s.p99:.1f}" if math.isfinite(s.e2e_s.p99) else "-",
            f"{s.throughput_tokens_per_s:,.0f}",
        ]
        if show_failed:
            row.append(str(s.failed))
        if show_preempt:
            row.append(str(point.preemptions))
        if report.goodput is not None:
            result = goodput[point.budget_tokens]
            row.append(f"{result.rate_per_s:.2f}" + ("+" if result.capped else ""))
        table.add_row(*row)
    if any(p.budget_tokens is not None and p.budget_tokens < ridge_tokens for p in report.points):
        table.caption = f"* below the ridge P* = {ridge_tokens:.0f} tokens"
    return table


def _ms(seconds: float, target_s: float | None = None) -> str:
    """Milliseconds with 3 significant figures; green/red against a target when given."""
    if not math.isfinite(seconds):
        return "-"
    ms = seconds * 1e3
    text = f"{ms:.1f}" if ms < 100 else f"{ms:,.0f}"
    if target_s is None:
        return text
    colour = "green" if seconds <= target_s else "red"
    return f"[{colour}]{text}[/{colour}]"
