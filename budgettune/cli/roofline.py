"""`budgettune roofline`: the ridge P* and what-if iteration times from the step-time model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from budgettune.app.requests import ModelRequest, RooflineRequest
from budgettune.cli import Command, app
from budgettune.cli import _model_options as mo
from budgettune.cli._common import console, print_json
from budgettune.cli._groups import with_groups

if TYPE_CHECKING:  # imported when the command runs: the CLI starts without it
    from budgettune.app.roofline import ChunkingTimes, RooflineAnswer


@app.command(cls=Command)
@with_groups(model=mo.MODEL)
def roofline(
    model: ModelRequest = mo.DEFAULTS,
    prefill: list[str] = typer.Option(
        [],
        "--prefill",
        help="A prompt chunk in the iteration: N tokens, or N@OFFSET for a chunk "
        "starting after OFFSET cached tokens. Repeatable; none by default.",
    ),
    decodes: int = typer.Option(0, "--decodes", help="Decoding requests in the iteration (count)."),
    context: int = typer.Option(0, "--context", help="Context length of each decode, tokens."),
    prompt: int | None = typer.Option(
        None,
        "--prompt",
        help="Prompt length, tokens: compare prefilling it at --chunk-sizes, at most 100,000 "
        "iterations (prompt / chunk) each (unset by default: one iteration of "
        "--prefill/--decodes instead).",
    ),
    chunk_sizes: str = typer.Option(
        "128,256,512,1024,2048",
        "--chunk-sizes",
        help="Comma-separated chunk sizes, tokens, used with --prompt.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON document instead of tables."
    ),
) -> None:
    """Print the ridge P* (memory- to compute-bound) and model iteration times.

    With --prefill/--decodes: the time of one iteration holding them. With --prompt: the time to
    prefill that prompt in chunks of each --chunk-sizes value, against one iteration.
    """
    from budgettune.app.roofline import ChunkingTimes, answer

    request = RooflineRequest(
        model=model,
        prefill=tuple(prefill),
        decodes=decodes,
        context=context,
        prompt=prompt,
        chunk_sizes=chunk_sizes,
    )
    found = answer(request)
    if as_json:
        print_json(found.to_json())
        return
    times = found.times
    mode = times.mode
    calibration = f"calibration {found.calibration.name}: {found.calibration.source}"
    if isinstance(times, ChunkingTimes):
        _print_chunking(times, prompt, decodes, context)
        _print_allreduce(found)
        console.print(calibration, style="dim", highlight=False)
        return
    console.print(
        f"Ridge P* = [bold]{times.ridge_tokens:.0f}[/bold] tokens per iteration "
        f"(below: memory-bound, every iteration pays a full weight read; above: compute-bound)."
    )
    if found.asked_iteration:
        bound = "compute-bound" if times.compute_bound else "memory-bound"
        console.print(
            f"One iteration of {times.prefill_tokens} prompt tokens and {decodes} decodes at "
            f"context {context}: [bold]{times.step_s * 1e3:.2f} ms[/bold] ({mode}, {bound})."
        )
        if found.allreduce is not None:
            console.print(
                f"Of which all-reduces: [bold]{times.comm_s * 1e3:.2f} ms[/bold] "
                f"({times.comm_share:.0%} of the iteration).",
                highlight=False,
            )
    _print_allreduce(found)
    console.print(calibration, style="dim", highlight=False)


def _print_allreduce(found: RooflineAnswer) -> None:
    """Tensor parallelism's all-reduces: their figures, and their share at the ridge."""
    allreduce, at_ridge = found.allreduce, found.at_ridge
    if allreduce is None:
        return
    console.print(
        f"Communication: {found.allreduces} all-reduces an iteration over {allreduce.gpus} GPUs "
        f"on {allreduce.link.name} (each {allreduce.latency_s * 1e6:.1f} us + the ring's bytes "
        f"at {allreduce.bytes_per_s / 1e9:.0f} GB/s).",
        highlight=False,
    )
    if at_ridge is not None:
        console.print(
            f"At the ridge ({at_ridge.prefill_tokens} prompt tokens): all-reduces "
            f"[bold]{at_ridge.comm_s * 1e3:.2f} ms[/bold] of {at_ridge.step_s * 1e3:.2f} ms "
            f"({at_ridge.comm_share:.0%}).",
            highlight=False,
        )
    console.print(f"all-reduce: {allreduce.source}", style="dim", highlight=False)


def _print_chunking(times: ChunkingTimes, prompt: int | None, decodes: int, context: int) -> None:
    """The --prompt table: each chunk size's iterations, their times and the overhead against
    prefilling the prompt in one iteration."""
    from rich.table import Table

    table = Table(
        title=f"Prefilling {prompt} tokens"
        + (f" beside {decodes} decodes at context {context}" if decodes else "")
        + f" ({times.mode}; ridge P* = {times.ridge_tokens:.0f} tokens)"
    )
    for column in ("chunk, tokens", "iterations", "per iteration, ms", "total, ms", "overhead"):
        table.add_column(column, justify="right")
    for row in times.chunked:
        steps = [s * 1e3 for s in row.step_s]
        per = f"{steps[0]:.2f}" if len(steps) == 1 else f"{min(steps):.2f}-{max(steps):.2f}"
        mark = " [red](below ridge)[/red]" if times.below_ridge(row) else ""
        table.add_row(
            f"{row.chunk_tokens}{mark}",
            str(len(steps)),
            per,
            f"{row.total_s * 1e3:.2f}",
            f"{row.overhead_pct:+.1f}%",
        )
    console.print(table)
    console.print(f"One iteration with the whole prompt: {times.one_shot_s * 1e3:.2f} ms")
