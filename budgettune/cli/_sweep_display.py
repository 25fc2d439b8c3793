"""The sweep's console: the live progress (profile step, candidates, engine starts, replays)
and the closing table with the verdict. Printing only; the sweep itself is
:mod:`budgettune.app.sweep`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

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

from budgettune.cli._common import console, console_err
from budgettune.core.units import format_ms
from budgettune.engines.base import EngineHandle, StartProgress
from budgettune.loadgen.selfcheck import prompt_length_sentence
from budgettune.tune.select import interval_text, rate_text

if TYPE_CHECKING:  # the live runner (httpx) and the sweep pipeline load when the command runs
    from budgettune.app.executors import Executor
    from budgettune.app.profile import ProfileConfig, ProfileOutcome
    from budgettune.app.sweep import SweepResult
    from budgettune.app.sweep_setup import PreparedSweep
    from budgettune.core.cache_count import PrefixCacheCount
    from budgettune.loadgen.runner import RunProgress
    from budgettune.tune.pair_grid import PairsOutcome
    from budgettune.tune.point import Point
    from budgettune.tune.predict import Prediction
    from budgettune.tune.sweep_config import SweepConfig


def profile_with_progress(config: ProfileConfig) -> ProfileOutcome:
    """The sweep's profile step with its own progress: the engine's start (elapsed time and the
    log's last line), then the probes (done of planned, ETA)."""
    from budgettune.app.sweep import profile_first

    with _progress() as progress:
        task = progress.add_task(f"profile: starting {config.engine}", total=None)

        def on_start(tick: StartProgress) -> None:
            last = tick.last_log_line.strip()[-60:]
            progress.update(
                task,
                description=f"profile: {tick.engine} {tick.phase} {tick.elapsed_s:.0f}s {last}",
            )

        def on_probe(series: str, done: int, planned: int) -> None:
            progress.update(
                task, description=f"profile: {series} probes", completed=done, total=planned
            )

        return profile_first(config, progress=on_probe, on_start=on_start)


def run_with_progress(prepared: PreparedSweep, executor: Executor) -> SweepResult:
    """The sweep with its live display: one line for the sweep, and a replay bar (one slot) or
    one line per slot."""
    from budgettune.app.sweep import SweepEvents, run_sweep_to_end
    from budgettune.app.sweep_pairs import run_pair_sweep_to_end

    config, traffic, finished = prepared.config, prepared.traffic, prepared.finished
    slots = prepared.slots.slots
    schedule = traffic.schedule
    with _progress() as progress:
        overall = progress.add_task("planning candidates", total=None)
        replay_task = progress.add_task("replay", total=len(schedule), visible=False)

        def on_plan(candidates: Any, predictions: Any) -> None:
            progress.update(
                overall,
                description=f"sweep over {len(candidates.budgets)} candidates "
                f"({', '.join(map(str, candidates.budgets))})",
            )
            console_err.print(
                f"candidates: {', '.join(map(str, candidates.budgets))} "
                f"({candidates.ridge_text}, expected decode batch "
                f"{candidates.decode_batch:.0f})",
                highlight=False,
            )

        def on_launch(budget: int, role: str) -> None:
            progress.update(overall, description=f"budget {budget} ({role}): starting engine")
            progress.update(replay_task, visible=False)

        def on_start(tick: StartProgress) -> None:
            last = tick.last_log_line.strip()[-60:]
            progress.update(
                overall, description=f"{tick.engine} {tick.phase} {tick.elapsed_s:.0f}s {last}"
            )

        def on_ready(handle: EngineHandle) -> None:
            progress.update(overall, description=f"budget {handle.budget_tokens}: replaying")
            # reset, not completed=0: a task that once completed keeps its finished time, and
            # its elapsed and remaining columns would stay frozen at the first replay's
            progress.reset(replay_task, total=len(schedule), visible=True)

        def on_replay(tick: RunProgress) -> None:
            progress.update(
                replay_task,
                completed=tick.finished,
                description=f"replay: {tick.sent} sent, {tick.failed} failed",
            )

        def on_point(point: Point) -> None:
            progress.update(replay_task, visible=False)
            console_err.print(_point_line(point, config), highlight=False, soft_wrap=True)

        def on_message(text: str) -> None:
            console_err.print(text, highlight=False)

        slot_tasks = (
            [progress.add_task(f"slot {s.index}: idle", total=None) for s in slots]
            if len(slots) > 1
            else []
        )

        def on_slot(index: int, text: str) -> None:
            if index < len(slot_tasks):
                progress.update(slot_tasks[index], description=f"slot {index}: {text}")

        def on_round(number: int, pairs: Sequence[tuple[int, str]]) -> None:
            if len(slots) > 1:
                budgets = ", ".join(str(b) for b, _ in pairs)
                progress.update(overall, description=f"round {number}: budgets {budgets}")
                console_err.print(f"round {number}: {budgets}", highlight=False)

        events = SweepEvents(
            on_plan=on_plan, on_launch=on_launch, on_start=on_start, on_ready=on_ready,
            on_replay=on_replay, on_point=on_point, on_message=on_message, on_slot=on_slot,
            on_round=on_round,
        )  # fmt: skip
        if config.tunes_max_num_seqs:  # two knobs: the budget with max-num-seqs
            return run_pair_sweep_to_end(config, traffic, events, executor=executor, slots=slots)
        return run_sweep_to_end(config, traffic, events, finished, slots=slots, executor=executor)


def _point_line(point: Point, config: SweepConfig) -> str:
    if not point.is_measured:
        return f"  budget {point.budget}: {point.status.value}: {point.error}"
    verdict = "meets both SLOs" if point.ok else "breaks an SLO"
    notes = [point.confidence.value] if point.confidence is not None else []
    if point.replays > 1:
        notes.append(f"{point.replays} replays")
    if point.stopped_early:
        notes.append("early stop")
    note = f" ({', '.join(notes)})" if notes else ""
    p = f"p{config.percentile:g}"

    def figure(value_ms: float | None, interval: tuple[float | None, float | None] | None) -> str:
        return format_ms(value_ms) + (
            f" [{interval_text(interval)}]" if interval is not None else ""
        )

    line = (
        f"  budget {point.budget}: {p} TBT (ITL) {figure(point.tbt_ms, point.tbt_ci_ms)}, "
        f"{p} TTFT {figure(point.ttft_ms, point.ttft_ci_ms)}: {verdict}{note} "
        f"[{point.wall_s:.0f} s]"
    )
    warnings = list(point.client_warnings)
    check = point.selfcheck or {}
    counted = check.get("prompt_tokens") or {}
    if counted.get("off"):
        form = str(check.get("prompt_form"))
        warnings.append(prompt_length_sentence(counted["off"], counted.get("checked"), form))
    for warning in warnings:
        line += f"\n  [yellow]warning:[/yellow] budget {point.budget}: {warning}"
    return line


def _interval_cell(interval: tuple[float | None, float | None] | None) -> str:
    """ " [21.9-23.4]" after a table figure: its 95% interval, in the figure's own format."""
    if interval is None:
        return ""
    low, high = interval
    high_text = "inf" if high is None else format_ms(high, unit=False)
    return f" [{format_ms(low, unit=False)}-{high_text}]"


def _hits_cell(point: Point | None, prediction: Prediction | None) -> list[str]:
    """The prefix cache's hit share, measured (the engine's counters) / predicted."""

    def share(count: PrefixCacheCount | None) -> str:
        value = None if count is None else count.hit_share
        return "-" if value is None else f"{value:.1%}"

    measured = point.prefix_cache if point is not None and point.is_measured else None
    return [f"{share(measured)} / {share(prediction.prefix_cache if prediction else None)}"]


def _goodput_cell(point: Point) -> str:
    if point.goodput is None:
        return "-"
    rate = point.goodput.rate_per_s
    return f">= {rate:.3g} (cap)" if point.goodput.capped else f"{rate:.3g}"


def print_result(result: SweepResult, config: SweepConfig) -> None:
    if result.pairs is not None:  # two knobs: the grid, then the chosen value's budgets
        _print_pairs(result.pairs, config)
        config = dataclasses.replace(config, default_budget=None)
    p = f"p{config.percentile:g}"
    load = (
        rate_text(config.rate_per_s, config.asked_rate_per_s, config.requests)
        if config.run.concurrency is None
        else f"{config.run.concurrency} in flight (closed loop, {config.requests} requests)"
    )
    table = Table(
        title=f"{p} at {load}, measured / predicted, 95% interval below (SLO TBT (ITL) <= "
        f"{format_ms(config.slo_tbt_s * 1e3)}, TTFT <= {format_ms(config.slo_ttft_s * 1e3)})",
        box=box.SIMPLE_HEAD,
    )
    columns = ["budget", "TBT ms", "TTFT ms", "tok/s", "failed", "verdict"]
    if config.goodput:
        columns.append("goodput req/s")
    # The prefix cache's share, measured / predicted, once anything was found cached.
    show_hits = any(
        p.prefix_cache is not None and p.prefix_cache.hits_tokens for p in result.points
    ) or any(p.prefix_cache is not None and p.prefix_cache.hits_tokens
             for p in result.predictions.values())  # fmt: skip
    if show_hits:
        columns.append("cache hits")
    for column in columns:
        table.add_column(column, justify="right")
    measured = {pt.budget: pt for pt in result.points}
    shown = {*result.candidates.budgets, *measured}
    if config.default_budget is not None:
        shown.add(config.default_budget)
    for budget in sorted(shown):
        prediction = result.predictions.get(budget)
        point = measured.get(budget)
        pred_tbt = format_ms(prediction.tbt_s * 1e3, unit=False) if prediction else "-"
        pred_ttft = format_ms(prediction.ttft_s * 1e3, unit=False) if prediction else "-"
        label = str(budget) + (" (default)" if budget == config.default_budget else "")
        hits = _hits_cell(point, prediction) if show_hits else []
        if point is None or not point.is_measured or point.measured is None:
            status = "[dim]not run[/dim]" if point is None else f"[red]{point.status.value}[/red]"
            cells = [label, f"- / {pred_tbt}", f"- / {pred_ttft}", "-", "-", status]
            table.add_row(*cells, *(["-"] if config.goodput else []), *hits)
            continue
        summary = point.measured
        verdict = "[green]pass[/green]" if point.ok else "[red]fail[/red]"
        if point.stopped_early:
            verdict += " (early)"
        marks = ["[yellow]marginal[/yellow]"] if point.marginal else []
        if point.replays > 1:
            marks.append(f"x{point.replays}")
        if marks:
            verdict += "\n" + " ".join(marks)
        tbt, ttft = format_ms(point.tbt_ms, unit=False), format_ms(point.ttft_ms, unit=False)
        table.add_row(
            label,
            f"{tbt} / {pred_tbt}{_interval_cell(point.tbt_ci_ms)}",
            f"{ttft} / {pred_ttft}{_interval_cell(point.ttft_ci_ms)}",
            f"{summary.throughput_tokens_per_s or 0:,.0f}",
            str(summary.failed),
            verdict,
            *([_goodput_cell(point)] if config.goodput else []),
            *hits,
        )
    console.print(table)
    from budgettune.tune.prediction_check import check_predictions

    check = check_predictions(result.points)
    if check is not None:
        style = "yellow" if check.ordering_only else "dim"
        console.print(f"[{style}]{check.sentence(config.percentile)}[/{style}]", highlight=False)
    rec = result.recommendation
    style = "bold green" if rec.budget_tokens is not None else "bold red"
    console.print(f"[{style}]{rec.headline}[/{style}]", highlight=False)
    for reason in rec.reasons:
        console.print(f"  {reason}", highlight=False)
    document = result.document
    how = (
        f" in {document['rounds']} round(s) of up to {document['parallel']} "
        f"({document['executor']})"
        if document.get("parallel", 1) != 1 or document.get("executor") == "ray"
        else ""
    )
    console.print(
        f"{result.launches} engine launch(es){how}, {result.wall_s:.0f} s. Files in "
        f"{config.run_dir}: " + ", ".join(path.name for path in result.files.values()),
        highlight=False,
    )


def _progress() -> Progress:
    """The live display of the profile step and the sweep: elapsed time and ETA; rendered
    rarely, since rendering holds the GIL beside the load generator's timing loop."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console_err,
        transient=True,
        refresh_per_second=4,
    )


def _print_pairs(grid: PairsOutcome, config: SweepConfig) -> None:
    """The two-knob grid: one row per budget, one column per max-num-seqs value; each cell the
    measured p-TBT / p-TTFT and verdict, or what the search inferred without measuring it."""
    p = f"p{config.percentile:g}"
    table = Table(
        title=f"{p} TBT / TTFT ms by budget and max-num-seqs ({grid.launches} of "
        f"{len(grid.predictions)} pairs launched)",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("budget", justify="right")
    for seqs in grid.seqs_values:
        table.add_column(f"seqs {seqs}", justify="right")
    for i, budget in enumerate(grid.budgets):
        row = [str(budget)]
        for j, seqs in enumerate(grid.seqs_values):
            point = grid.measured[seqs].get(budget)
            if point is not None and point.is_measured:
                figures = (
                    f"{format_ms(point.tbt_ms, unit=False)} / "
                    f"{format_ms(point.ttft_ms, unit=False)}"
                )
                mark = "[green]pass[/green]" if point.ok else "[red]fail[/red]"
                if grid.chosen == (budget, seqs):
                    mark = "[bold green]chosen[/bold green]"
                row.append(f"{figures}\n{mark}")
            elif point is not None:
                row.append(f"[red]{point.status.value}[/red]")
            else:
                implied = {True: "meets (implied)", False: "fails (implied)", None: "-"}
                row.append(f"[dim]{implied[grid.state.feasible((i, j))]}[/dim]")
        table.add_row(*row)
    console.print(table)
