"""``python -m budgettune.engines.embedded``: the embedded engine's own small argparse CLI, its
flags mirroring ``vllm serve`` (so budgettune launches it as it launches vLLM). An error about a
field is shown as this CLI's flag for it."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from budgettune.core.engine_defaults import default_budget_on
from budgettune.core.errors import BudgettuneError
from budgettune.core.hardware import resolve_gpu
from budgettune.engines.embedded.config import SimServerConfig
from budgettune.engines.embedded.server import serve
from budgettune.model.stepmodel import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_OVERHEAD_S,
)
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m budgettune.engines.embedded",
        description="budgettune's simulated OpenAI-compatible engine (flags mirror vllm serve).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="llama-3.1-8b", help="model preset or config.json/folder")
    p.add_argument("--gpu", default="h100-sxm", help="GPU preset")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget (default: vLLM's rule for the GPU)",
    )
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--enable-chunked-prefill", dest="chunked", action="store_true", default=True)
    p.add_argument("--no-enable-chunked-prefill", dest="chunked", action="store_false")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--stream-interval", type=int, default=1, help="write tokens every N")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply modeled step times")
    p.add_argument("--compute-efficiency", type=float, default=DEFAULT_COMPUTE_EFFICIENCY)
    p.add_argument("--bandwidth-efficiency", type=float, default=DEFAULT_BANDWIDTH_EFFICIENCY)
    p.add_argument("--overhead-ms", type=float, default=DEFAULT_OVERHEAD_S * 1e3)
    p.add_argument("--mode", default="overlapped", choices=("overlapped", "serialized"))
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="profile JSON from `budgettune profile`: its calibrated step model replaces "
        "--model, --dtype and the efficiency flags (KV cache sized on its GPU preset, else --gpu)",
    )
    p.add_argument(
        "--emission-log",
        type=Path,
        default=None,
        help="CSV of every stream write: request, tokens, monotonic time (s)",
    )
    return p  # fmt: skip


def flag_of(field: str | None) -> str | None:
    """This CLI's flag for a :class:`SimServerConfig` field (``time_scale`` -> ``--time-scale``,
    ``budget_tokens`` -> ``--max-num-batched-tokens``); any other field as it is."""
    if field == "budget_tokens":
        return "--max-num-batched-tokens"
    if field in {f.name for f in fields(SimServerConfig)}:
        return "--" + field.replace("_", "-")
    return field


def config_from_args(argv: Sequence[str] | None = None) -> SimServerConfig:
    args = build_parser().parse_args(argv)
    budget = args.max_num_batched_tokens
    if budget is None:
        budget = default_budget_on("sim", resolve_gpu(args.gpu)).budget_tokens
    return SimServerConfig(
        budget_tokens=budget if args.chunked else None,
        max_num_seqs=args.max_num_seqs,
        model=args.model,
        gpu=args.gpu,
        dtype=args.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        time_scale=args.time_scale,
        stream_interval=args.stream_interval,
        compute_efficiency=args.compute_efficiency,
        bandwidth_efficiency=args.bandwidth_efficiency,
        overhead_ms=args.overhead_ms,
        mode=args.mode,
        emission_log=args.emission_log,
        profile=args.profile,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m budgettune.engines.embedded`` (its own small CLI)."""
    try:
        config = config_from_args(argv)

        def ready(url: str, banner: str) -> None:
            print(f"{banner}\nlistening on {url}", flush=True)

        summary = asyncio.run(serve(config, on_ready=ready))
    except BudgettuneError as error:
        print(f"error: {error.shown_as(flag_of(error.field))}", file=sys.stderr, flush=True)
        return 2
    except OSError as error:
        print(f"error: cannot listen: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"stopped; {summary}", flush=True)
    return 0
