"""`budgettune serve --engine sim`: run the embedded OpenAI-compatible simulated engine in the
foreground (Ctrl-C stops it), so any client can be pointed at it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgettune.app.requests import ServeRequest
from budgettune.cli import Command, app
from budgettune.cli import _model_options as mo
from budgettune.cli._common import console, console_err
from budgettune.cli._groups import with_groups
from budgettune.model.calibration import CalibrationChoice
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION


@app.command(cls=Command)
@with_groups(calibration=mo.CALIBRATION)
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
            "512 or 2k; 'none' = no chunking. Default: vLLM 0.32's on --gpu (16384 from 160 "
            "GiB, 8192 from 70 GiB but A100, else 2048).",
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            "--max-num-seqs",
            min=1,
            help="Most running sequences (default: vLLM's default on --gpu: 1024 from 70 GiB "
            "other than A100, else 256).",
        ),
    ] = None,
    model: mo.Model = mo.DEFAULTS.model,
    gpu: mo.GpuName = mo.DEFAULTS.gpu,
    dtype: mo.Dtype = mo.DEFAULTS.dtype,
    tensor_parallel: mo.TensorParallel = mo.DEFAULTS.tensor_parallel,
    calibration: CalibrationChoice = mo.DEFAULTS.calibration,  # mo.CALIBRATION, packed
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
    prefix_caching: Annotated[
        str,
        typer.Option(
            "--prefix-caching",
            help="engine (default: on, as vLLM V1), on or off: keep full prompt blocks and "
            "skip their prefill when a later prompt starts with them.",
        ),
    ] = "engine",
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
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="VLLM_API_KEY",
            show_default=False,
            help="Answer /v1 requests without 'Authorization: Bearer KEY' with 401, as vLLM.",
        ),
    ] = None,
) -> None:
    """Serve the simulated engine on an OpenAI-compatible API until Ctrl-C.

    POST /v1/completions and /v1/chat/completions (streamed or not), GET
    /health, /v1/models, /version, /metrics (vLLM metric names). Iterations
    follow the roofline step-time model in real time (the presets', or a
    calibrated one with --profile). --api-key (or VLLM_API_KEY) guards /v1.
    """
    from budgettune.app.serve import serve_until_stopped, server_config

    request = ServeRequest(
        engine=engine,
        budget=budget,
        max_model_len=max_model_len,
        gpu=gpu,
        max_num_seqs=max_num_seqs,
        model=model,
        dtype=dtype,
        tensor_parallel=tensor_parallel,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        long_prefill_token_threshold=long_prefill_token_threshold,
        prefix_caching=prefix_caching,
        host=host,
        port=port,
        served_model_name=served_model_name,
        time_scale=time_scale,
        stream_interval=stream_interval,
        calibration=calibration,
        emission_log=emission_log,
        profile=profile,
        api_key=api_key,
    )
    config = server_config(request)

    def ready(url: str, banner: str) -> None:
        console.print(banner, highlight=False)
        console.print(f"serving on {url}/v1 (Ctrl-C stops)", highlight=False)

    summary = serve_until_stopped(config, ready)
    console_err.print(f"stopped; {summary}", highlight=False)
