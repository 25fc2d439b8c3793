"""`budgettune roofline`: the ridge P* and what-if iteration times from the step-time model."""

from __future__ import annotations

import typer
from rich.table import Table

from budgettune.app.roofline import chunking_report, iteration_report, parse_prefill_chunk
from budgettune.cli import Command, app
from budgettune.cli import _model_options as mo
from budgettune.cli._common import console, print_json
from budgettune.core.errors import SpecError
from budgettune.core.units import parse_int_list


@app.command(cls=Command)
def roofline(
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
        help="Prompt length, tokens: compare prefilling it at --chunk-sizes (unset by default: "
        "one iteration of --prefill/--decodes instead).",
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
    if decodes < 0:
        raise SpecError(f"--decodes: must be zero or more, got {decodes}")
    if context < 0:
        raise SpecError(f"--context: must be zero or more, got {context}")
    if prompt is not None and prefill:
        raise SpecError("--prompt and --prefill ask different questions; give one of them")
    if prompt is not None and prompt <= 0:
        raise SpecError(f"--prompt: must be a positive number of tokens, got {prompt}")
    step_model = mo.step_model_from_options(
        model=model,
        gpu=mo.gpu_from_options(gpu, peak_tflops, bandwidth_tbs, memory_gb),
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
        overhead_ms=overhead_ms,
        mode=mode,
    )
    if prompt is not None:
        sizes = parse_int_list(chunk_sizes, field="--chunk-sizes")
        doc = chunking_report(step_model, prompt, sizes, decodes, context)
        if as_json:
            print_json(doc)
            return
        table = Table(
            title=f"Prefilling {prompt} tokens"
            + (f" beside {decodes} decodes at context {context}" if decodes else "")
            + f" ({mode}; ridge P* = {doc['ridge_tokens']:.0f} tokens)"
        )
        for column in ("chunk, tokens", "iterations", "per iteration, ms", "total, ms", "overhead"):
            table.add_column(column, justify="right")
        for row in doc["chunking"]:
            steps = row["step_ms"]
            per = f"{steps[0]:.2f}" if len(steps) == 1 else f"{min(steps):.2f}-{max(steps):.2f}"
            mark = " [red](below ridge)[/red]" if row["below_ridge"] else ""
            table.add_row(
                f"{row['chunk_tokens']}{mark}",
                str(len(steps)),
                per,
                f"{row['total_ms']:.2f}",
                f"{row['overhead_pct']:+.1f}%",
            )
        console.print(table)
        console.print(f"One iteration with the whole prompt: {doc['one_shot_ms']:.2f} ms")
        return
    chunks = [parse_prefill_chunk(text) for text in prefill]
    doc = iteration_report(step_model, chunks, decodes, context)
    if as_json:
        if not (chunks or decodes):  # no iteration asked about: the ridge alone, no 0 ms step
            doc = {"ridge_tokens": doc["ridge_tokens"], "mode": doc["mode"]}
        print_json(doc)
        return
    console.print(
        f"Ridge P* = [bold]{doc['ridge_tokens']:.0f}[/bold] tokens per iteration "
        f"(below: memory-bound, every iteration pays a full weight read; above: compute-bound)."
    )
    if chunks or decodes:
        bound = "compute-bound" if doc["compute_bound"] else "memory-bound"
        console.print(
            f"One iteration of {doc['prefill_tokens']} prompt tokens and {decodes} decodes at "
            f"context {context}: [bold]{doc['step_ms']:.2f} ms[/bold] ({mode}, {bound})."
        )
