"""`budgettune simulate`: latency percentiles per token budget from the built-in simulator, on
synthetic traffic or a replayed trace, optionally each budget's goodput under p99 TBT/TTFT SLOs,
and with -o a results.json and an HTML report."""

from __future__ import annotations

import math
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from budgettune.app.simulate import (
    DEFAULT_BUDGETS,
    Budget,
    SimulateReport,
    budget_label,
    parse_budgets,
    run_simulate,
)
from budgettune.cli import Command, app
from budgettune.cli import _model_options as mo
from budgettune.cli import _trace_options as to
from budgettune.cli._common import console, console_err, print_json, print_warning
from budgettune.core.errors import SpecError
from budgettune.core.slo import SLO
from budgettune.core.units import parse_duration_s
from budgettune.sim.kvcache import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    kv_capacity_blocks,
)
from budgettune.sim.scheduler import SchedulerConfig

if TYPE_CHECKING:  # rich's tables and progress load when the command prints them
    from rich.table import Table

    from budgettune.core.hardware import GPU
    from budgettune.model.stepmodel import StepModel
    from budgettune.trace.schedule import Schedule
    from budgettune.tune.goodput import RateProbe

DEFAULT_RATE_PER_S = 16.0
DEFAULT_REQUESTS = 2000
DEFAULT_OUTPUT_DIST = "lognormal:mean=250,sigma=1.0,max=4096"  # simulate's own, since issue 2


_HELP = (
    "Simulate the token-budget scheduler on synthetic traffic or a trace and compare budgets.\n\n"
    "For each budget: TTFT, TBT (every gap between two tokens), TPOT and E2E percentiles and "
    "output throughput, from the roofline step-time model in virtual time. Failed requests "
    "(too long for the KV cache) count as SLO violations. With --goodput, each budget's "
    f"highest rate meeting the p99 SLOs. Without --trace: {DEFAULT_REQUESTS} requests, Poisson "
    f"arrivals at {DEFAULT_RATE_PER_S:g} requests/s, lengths from --prompt-dist and "
    "--output-dist. With --trace FILE: its requests at their recorded times (or --arrivals "
    "poisson/gamma --rate R)."
)


@app.command(cls=Command, help=_HELP)
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
    profile: Path | None = mo.PROFILE,
    budgets: str = typer.Option(
        DEFAULT_BUDGETS,
        "--budgets",
        help="Comma-separated token budgets per iteration (vLLM --max-num-batched-tokens), "
        "tokens; 'none' = no chunking (whole prompts first, no decodes beside them).",
    ),
    trace: Path | None = to.TRACE,
    format: str | None = to.FORMAT,
    columns: str | None = to.COLUMNS,
    arrivals: str | None = typer.Option(
        None,
        "--arrivals",
        help="Arrival process: poisson (default without --trace) or gamma (see --burstiness); "
        "with --trace also recorded (its own times, the default when it has them).",
        rich_help_panel=to.PANEL,
    ),
    rate: float | None = typer.Option(
        None,
        "--rate",
        help=f"Mean arrival rate, requests/s (default {DEFAULT_RATE_PER_S:g} without --trace; "
        "with a recorded trace its own rate, or rescaled to this).",
        rich_help_panel=to.PANEL,
    ),
    burstiness: float = to.BURSTINESS,
    time_scale: float = to.TIME_SCALE,
    window: str | None = to.WINDOW,
    requests: int | None = typer.Option(
        None,
        "--requests",
        help=f"Requests to simulate, count (default {DEFAULT_REQUESTS} without --trace; with "
        "one, all its requests, or the first N).",
        rich_help_panel=to.PANEL,
    ),
    duration: str | None = to.DURATION,
    max_model_len: str | None = to.MAX_MODEL_LEN,
    on_long: str = to.ON_LONG,
    strict: bool = to.STRICT,
    seed: int = to.SEED,
    prompt_dist: str | None = to.PROMPT_DIST,
    output_dist: str | None = typer.Option(
        None,
        "--output-dist",
        help="Output length distribution without a trace, tokens: "
        "lognormal:mean=M,sigma=S[,min=A][,max=B] (mean of the lengths), fixed:N or "
        f"uniform:min=A,max=B (default {DEFAULT_OUTPUT_DIST}).",
        rich_help_panel=to.PANEL,
    ),
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
        DEFAULT_BLOCK_SIZE,
        "--block-size",
        help="KV-cache block size, tokens.",
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
        "p99 TBT and p99 TTFT meet --slo-tbt and --slo-ttft, starting from --rate (a trace: "
        "rescaled or redrawn at each rate tried).",
    ),
    slo_tbt: str = typer.Option(
        "50ms",
        "--slo-tbt",
        help="p99 time-between-tokens target for --goodput and the -o report (e.g. 50ms).",
    ),
    slo_ttft: str = typer.Option(
        "1s",
        "--slo-ttft",
        help="p99 time-to-first-token target for --goodput and the -o report (e.g. 1s).",
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Folder to write results.json (every option, every point, per-request TTFT/E2E "
        "and a TBT sample) and report.html into; nothing is written without it.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document, no tables."),
) -> None:
    """`budgettune simulate` (help text in _HELP: typer keeps a docstring's line breaks)."""
    options = {k: str(v) if isinstance(v, Path) else v for k, v in locals().items()}
    budget_list = parse_budgets(budgets)
    # Parsed even without --goodput, so a typo never passes silently.
    targets = SLO(
        parse_duration_s(slo_tbt, field="--slo-tbt"),
        parse_duration_s(slo_ttft, field="--slo-ttft"),
    )
    slo = targets if goodput else None
    if trace is None:  # simulate's own synthetic defaults (issue 2), not the shared ones
        rate = DEFAULT_RATE_PER_S if rate is None else rate
        output_dist = output_dist or DEFAULT_OUTPUT_DIST
    traffic = to.traffic_from_options(
        trace=trace, format=format, columns=columns, arrivals=arrivals, rate=rate,
        burstiness=burstiness, time_scale=time_scale, window=window, requests=requests,
        duration=duration, max_model_len=max_model_len, on_long=on_long, strict=strict,
        seed=seed, prompt_dist=prompt_dist, output_dist=output_dist,
        default_requests=DEFAULT_REQUESTS,
        on_warning=print_warning,
    )  # fmt: skip
    first = traffic.schedule
    start_rate = first.rate_per_s if rate is None else rate
    if not math.isfinite(start_rate):
        raise SpecError(
            f"--trace: {len(first)} request(s) with no time span have no arrival rate; "
            "give --arrivals poisson --rate R"
        )
    gpu_spec = mo.gpu_from_options(gpu, peak_tflops, bandwidth_tbs, memory_gb)
    model_label = f"{model} on {gpu_spec.name} ({mode})"
    ridge_label = "ridge P* = {:.0f} tokens"
    if profile is not None:
        from budgettune.engines.embedded.profiled import profiled_model

        # The profile's GPU preset (else --gpu) sizes the KV cache; a custom GPU is not used.
        profiled = profiled_model(profile, gpu)
        step_model, gpu_spec = profiled.step_model, profiled.gpu
        tensor_parallel = profiled.tensor_parallel
        options.update(model=profiled.shape.name, dtype=profiled.dtype, mode=step_model.mode)
        model_label = f"{profiled.shape.name} from {profiled.description} ({step_model.mode})"
        if not profiled.knee_found:
            # F/B of the fitted model is not a knee the measurements showed: say which it is.
            ridge_label = "fitted F/B = {:.0f} tokens (the profile found no knee)"
    else:
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
        # The first schedule as built (a time-scaled trace, a window) at its own rate; the
        # goodput search's other rates rescale the trace or redraw the arrivals.
        return first if rate_per_s == start_rate else traffic.at_rate(rate_per_s)

    def run(on_probe: Callable[[Budget, RateProbe], None] | None = None) -> SimulateReport:
        return run_simulate(
            step_model=step_model,
            scheduler=scheduler,
            budgets=budget_list,
            schedule_at=schedule_at,
            rate_per_s=start_rate,
            warmup_requests=warmup,
            slo=slo,
            on_probe=on_probe,
            keep_detail=output is not None,
        )

    report = run() if slo is None else _with_progress(run)
    if output is not None:
        _write(report, output, options, traffic, start_rate, targets, step_model, gpu_spec, trace)
    if as_json:
        print_json(report.to_json())
        return
    console.print(
        f"{model_label}; {ridge_label.format(step_model.ridge_tokens)}; "
        f"KV cache {capacity:,} blocks of {block_size} tokens",
        highlight=False,
    )
    if traffic.report is None:
        console.print(
            f"{len(first)} requests at {start_rate:g} req/s ({arrivals or 'poisson'}, seed "
            f"{seed}); prompts {_spec(prompt_dist or to.DEFAULT_PROMPT_DIST)}; outputs "
            f"{_spec(output_dist or DEFAULT_OUTPUT_DIST)}",
            highlight=False,
        )
    else:
        console.print(
            f"trace {traffic.report.path}: {traffic.report.summary()}\n"
            f"{traffic.description}, mean {start_rate:.3g} req/s"
            + (f", seed {seed}" if arrivals in ("poisson", "gamma") else ""),
            highlight=False,
        )
    console.print(_table(report, slo, step_model.ridge_tokens))
    if output is not None:
        console.print(f"results: {output / 'results.json'}; report: {output / 'report.html'}")


def _spec(text: str) -> str:
    from budgettune.trace.dists import parse_length_dist

    return parse_length_dist(text).spec


def _write(
    report: SimulateReport,
    folder: Path,
    options: dict[str, Any],
    traffic: to.Traffic,
    rate_per_s: float,
    slo: SLO,
    step_model: StepModel,
    gpu: GPU,
    trace: Path | None,
) -> None:
    """results.json (kind "simulate") and report.html in ``folder``."""
    from budgettune.app.simulate import simulate_results, write_simulate_outputs
    from budgettune.core.hardware import resolve_model

    # With --profile the shape came from the profile file (options["model"] is its name).
    shape_name = options["model"] if options["profile"] else resolve_model(options["model"]).name
    config = {
        **options,
        "traffic": traffic.description,
        "rate_per_s": rate_per_s,
        "requests_simulated": len(traffic.schedule),
        "slo_tbt_s": slo.tbt_s,
        "slo_ttft_s": slo.ttft_s,
        "python_version": platform.python_version(),
    }
    hardware = {
        "gpu": gpu.name,
        "peak_tflops": gpu.peak_flops / 1e12,
        "bandwidth_tbs": gpu.bandwidth_bytes_per_s / 1e12,
        "memory_gb": gpu.memory_bytes / 1e9,
        "model": shape_name,
        "params": step_model.params,
        "ridge_tokens": step_model.ridge_tokens,
    }
    results = simulate_results(
        report,
        config=config,
        command=("budgettune", *sys.argv[1:]),
        hardware=hardware,
        trace=trace,
    )
    write_simulate_outputs(results, folder)


def _with_progress(
    run: Callable[[Callable[[Budget, RateProbe], None]], SimulateReport],
) -> SimulateReport:
    """Run the goodput search under a progress display on stderr."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

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
