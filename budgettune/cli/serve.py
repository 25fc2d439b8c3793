"""`budgettune serve --engine sim`: run the embedded OpenAI-compatible simulated engine in the
foreground (Ctrl-C stops it), so any client can be pointed at it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from budgettune.app.simulate import parse_budgets
from budgettune.cli import Command, app
from budgettune.cli import _model_options as mo
from budgettune.cli._common import console, console_err
from budgettune.core.engine_defaults import default_budget_on
from budgettune.core.errors import SpecError, UserError
from budgettune.core.hardware import resolve_gpu
from budgettune.core.units import parse_tokens
from budgettune.engines.embedded.config import SimServerConfig
from budgettune.engines.embedded.server import serve as serve_sim
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION

SERVABLE = ("sim",)


@app.command(cls=Command)
def serve(
    engine: Annotated[
        str, typer.Option("--engine", help="Engine to serve: sim (built in).")
    ] = "sim",
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            "--max-num-batched-tokens",
            help="Token budget per iteration, e.g. "
            "512 or 2k; 'none' = no chunking. Default: vLLM's (8192 on >= 70 GiB GPUs but A100, "
            "else 2048).",
        ),
    ] = None,
    max_num_seqs: Annotated[
        int, typer.Option("--max-num-seqs", min=1, help="Most running sequences.")
    ] = 256,
    model: mo.Model = mo.DEFAULTS.model,
    gpu: mo.GpuName = mo.DEFAULTS.gpu,
    dtype: mo.Dtype = mo.DEFAULTS.dtype,
    compute_efficiency: mo.ComputeEfficiency = mo.DEFAULTS.compute_efficiency,
    bandwidth_efficiency: mo.BandwidthEfficiency = mo.DEFAULTS.bandwidth_efficiency,
    overhead_ms: mo.OverheadMs = mo.DEFAULTS.overhead_ms,
    mode: mo.Mode = mo.DEFAULTS.mode,
    profile: mo.Profile = None,
    max_model_len: Annotated[
        str | None,
        typer.Option("--max-model-len", help="Context limit, tokens (default: the model's)."),
    ] = None,
    gpu_memory_utilization: Annotated[
        float,
        typer.Option(
            "--gpu-memory-utilization", help="Share of GPU memory for weights and KV cache, 0-1."
        ),
    ] = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: Annotated[
        int, typer.Option("--block-size", help="KV block, tokens.")
    ] = DEFAULT_BLOCK_SIZE,
    long_prefill_token_threshold: Annotated[
        int,
        typer.Option(
            "--long-prefill-token-threshold",
            help="Most prompt tokens per request and iteration; 0 = off.",
        ),
    ] = 0,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    served_model_name: Annotated[
        str | None,
        typer.Option("--served-model-name", help="Model id clients name (default: the model's)."),
    ] = None,
    stream_interval: Annotated[
        int,
        typer.Option("--stream-interval", min=1, help="Write streamed tokens every N (as vLLM)."),
    ] = 1,
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", help="Multiply every modeled step time (2 = twice as slow)."),
    ] = 1.0,
    emission_log: Annotated[
        Path | None,
        typer.Option(
            "--emission-log", help="CSV of every stream write: request, tokens, monotonic s."
        ),
    ] = None,
) -> None:
    """Serve the simulated engine on an OpenAI-compatible API until Ctrl-C.

    POST /v1/completions (streamed or not), GET /health, /v1/models, /version,
    /metrics (vLLM metric names). Iterations follow the roofline step-time
    model in real time (the presets', or a calibrated one with --profile).
    """
    if engine.strip().lower() not in SERVABLE:
        raise SpecError(
            f"`serve` runs {', '.join(SERVABLE)}; got {engine!r} "
            "(launch vLLM or SGLang with their own commands)",
            field="engine",
        )
    if budget is None:
        budget_tokens: int | None = default_budget_on("sim", resolve_gpu(gpu)).budget_tokens
    else:
        budgets = parse_budgets(budget, field="budget")
        if len(budgets) != 1:
            raise SpecError(f"one budget, got {budget!r}", field="budget")
        budget_tokens = budgets[0]
    config = SimServerConfig(
        budget_tokens=budget_tokens,
        max_num_seqs=max_num_seqs,
        model=model,
        gpu=gpu,
        dtype=dtype,
        max_model_len=parse_tokens(max_model_len, field="max_model_len") if max_model_len else None,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        long_prefill_token_threshold=long_prefill_token_threshold,
        host=host,
        port=port,
        served_model_name=served_model_name,
        time_scale=time_scale,
        stream_interval=stream_interval,
        compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
        overhead_ms=overhead_ms,
        mode=mode,
        emission_log=emission_log,
        profile=profile,
    )

    def ready(url: str, banner: str) -> None:
        console.print(banner, highlight=False)
        console.print(f"serving on {url}/v1 (Ctrl-C stops)", highlight=False)

    try:
        summary = asyncio.run(serve_sim(config, on_ready=ready))
    except OSError as exc:
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="port"
        ) from None
    console_err.print(f"stopped; {summary}", highlight=False)
