"""``python -m budgettune.engines.embedded``: the embedded engine's own small argparse CLI, its
flags mirroring ``vllm serve`` (so budgettune launches it as it launches vLLM). An error about a
field is shown as this CLI's flag for it."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path

from budgettune.core.engine_defaults import default_budget_on
from budgettune.core.errors import BudgettuneError
from budgettune.core.hardware import resolve_gpu
from budgettune.engines.embedded.config import SimServerConfig
from budgettune.engines.embedded.engine import API_KEY_VAR
from budgettune.engines.embedded.http11 import (
    DEFAULT_KEEP_ALIVE_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)
from budgettune.engines.embedded.server import serve
from budgettune.model.calibration import CALIBRATIONS, DEFAULT_CALIBRATION, CalibrationChoice
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m budgettune.engines.embedded",
        description="budgettune's simulated OpenAI-compatible engine (flags mirror vllm serve).",
        allow_abbrev=False,  # --mode must not read as --model (budgettune refuses the managed)
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="llama-3.1-8b", help="model preset or config.json/folder")
    p.add_argument("--gpu", default="h100-sxm", help="GPU preset")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="GPUs the model is split over: they pool FLOP/s, bandwidth and memory, and "
        "all-reduce every layer's activations",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=None,
        help="token budget (default: vLLM's rule for the GPU)",
    )
    # default: vLLM's rule for the GPU preset (core/engine_defaults.py), as the budget's
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--enable-chunked-prefill", dest="chunked", action="store_true", default=True)
    p.add_argument("--no-enable-chunked-prefill", dest="chunked", action="store_false")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    p.add_argument("--block-size", type=int, default=DEFAULT_BLOCK_SIZE)
    p.add_argument("--long-prefill-token-threshold", type=int, default=0)
    # vLLM V1's default: on for a decoder model; its flags, both spellings.
    p.add_argument(
        "--enable-prefix-caching", dest="prefix_caching", action="store_true", default=True
    )
    p.add_argument("--no-enable-prefix-caching", dest="prefix_caching", action="store_false")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--stream-interval", type=int, default=1, help="write tokens every N")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply modeled step times")
    p.add_argument("--calibration", default=DEFAULT_CALIBRATION, choices=CALIBRATIONS)
    # the calibration's figures unless given
    p.add_argument("--compute-efficiency", type=float, default=None)
    p.add_argument("--bandwidth-efficiency", type=float, default=None)
    p.add_argument("--kv-bandwidth-efficiency", type=float, default=None)
    p.add_argument("--overhead-ms", type=float, default=None)
    p.add_argument("--mode", default=None, choices=("overlapped", "serialized"))
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="profile JSON from `budgettune profile`: its calibrated step model replaces "
        "--model, --dtype and the efficiency flags (KV cache sized on its GPU preset, else --gpu)",
    )
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1 paths (default: $VLLM_API_KEY, as vLLM)",
    )
    p.add_argument(
        "--timeout-keep-alive",
        type=float,
        default=DEFAULT_KEEP_ALIVE_TIMEOUT_S,
        help="close a connection idle this many seconds (vLLM's flag and default)",
    )
    p.add_argument(
        "--timeout-request",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT_S,
        help="close a connection whose request has not arrived whole this many seconds after its "
        "first byte",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        help="a `vllm serve --config` YAML file: the keys this engine models set its flags (flags "
        "given on the command line win, as in vLLM); the others are named and ignored",
    )
    p.add_argument(
        "--emission-log",
        type=Path,
        default=None,
        help="CSV of every stream write: request, tokens, monotonic time (s)",
    )
    return p  # fmt: skip


def calibration_flags(choice: CalibrationChoice) -> list[str]:
    """This CLI's flags for ``choice``: the calibration, and each figure given (what a caller
    launching the engine passes so that it runs the model its predictions use)."""
    flags = []
    for name, value in choice.given().items():
        flags += ["--" + name.replace("_", "-"), str(value)]
    return flags


def flag_of(field: str | None) -> str | None:
    """This CLI's flag for a :class:`SimServerConfig` field (``time_scale`` -> ``--time-scale``,
    ``budget_tokens`` -> ``--max-num-batched-tokens``); any other field as it is."""
    renamed = {
        "budget_tokens": "--max-num-batched-tokens",
        "keep_alive_timeout_s": "--timeout-keep-alive",
        "request_timeout_s": "--timeout-request",
        "tensor_parallel": "--tensor-parallel-size",
    }
    if field in renamed:
        return renamed[field]
    if field in {f.name for f in fields(SimServerConfig)}:
        return "--" + field.replace("_", "-")
    return field


def parse_with_config(
    argv: Sequence[str] | None, on_ignored: Callable[[str], None] | None = None
) -> argparse.Namespace:
    """The command line, over the ``--config`` file's settings where it gives one: each key this
    parser knows becomes that flag's default (``key: true`` sets a switch, ``key: false`` its
    ``--no-key`` where there is one, as vLLM 0.32's reader does), so the command line wins;
    ``on_ignored`` hears one line naming the keys it does not model. Raises UserError for a file
    that is not a flag mapping."""
    parser = build_parser()
    first, _ = parser.parse_known_args(argv)
    if first.config is None:
        return parser.parse_args(argv)
    from budgettune.engines.config_file import read_engine_config

    config = read_engine_config(first.config)
    by_flag = {
        option: action
        for action in parser._actions  # argparse keeps no public map of flags to actions
        for option in action.option_strings
    }
    defaults: dict[str, object] = {}
    ignored = []
    for name, value in config.settings.items():
        action = by_flag.get(f"--{name}")
        if action is None or name == "config":
            ignored.append(config.spelled[name])
        elif action.const is not None and action.nargs == 0:  # a switch
            negated = by_flag.get(f"--no-{name}")
            if value is True:
                defaults[action.dest] = action.const
            elif value is False and negated is not None and negated.nargs == 0:
                defaults[negated.dest] = negated.const  # vLLM: "key: false" is --no-key
        elif value is not None and value is not False:
            convert = action.type if callable(action.type) else str
            defaults[action.dest] = convert(str(value))
    parser.set_defaults(**defaults)
    if ignored and on_ignored is not None:
        on_ignored(
            f"{first.config}: the built-in engine does not model {', '.join(ignored)}; ignored"
        )
    return parser.parse_args(argv)


def config_from_args(
    argv: Sequence[str] | None = None, on_ignored: Callable[[str], None] | None = None
) -> SimServerConfig:
    args = parse_with_config(argv, on_ignored)
    budget, max_num_seqs = args.max_num_batched_tokens, args.max_num_seqs
    if budget is None or max_num_seqs is None:
        defaults = default_budget_on("sim", resolve_gpu(args.gpu))
        budget = budget or defaults.budget_tokens
        max_num_seqs = max_num_seqs or defaults.max_num_seqs or 256
    return SimServerConfig(
        budget_tokens=budget if args.chunked else None,
        max_num_seqs=max_num_seqs,
        model=args.model,
        gpu=args.gpu,
        dtype=args.dtype,
        tensor_parallel=args.tensor_parallel_size,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        block_size=args.block_size,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        prefix_caching=args.prefix_caching,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        time_scale=args.time_scale,
        stream_interval=args.stream_interval,
        calibration=CalibrationChoice(
            args.calibration,
            args.compute_efficiency,
            args.bandwidth_efficiency,
            args.kv_bandwidth_efficiency,
            args.overhead_ms,
            args.mode,
        ),
        emission_log=args.emission_log,
        profile=args.profile,
        # vLLM's precedence: the flag, else VLLM_API_KEY; empty means none.
        api_key=args.api_key or os.environ.get(API_KEY_VAR) or None,
        keep_alive_timeout_s=args.timeout_keep_alive,
        request_timeout_s=args.timeout_request,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m budgettune.engines.embedded`` (its own small CLI)."""
    try:
        config = config_from_args(argv, lambda line: print(line, file=sys.stderr, flush=True))

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
