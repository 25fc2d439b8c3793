"""The embedded simulated engine: an OpenAI-compatible HTTP server whose iterations are the
simulator's scheduler and step-time model run in real time
(:mod:`budgettune.engines.embedded.core`).

Run it as ``python -m budgettune.engines.embedded --max-num-batched-tokens 512 --port 8000``
(flags mirror ``vllm serve``), as ``budgettune serve --engine sim``, or launch it through
:class:`SimEngine` like any other engine. Text prompts count ceil(UTF-8 bytes / 4) tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from budgettune import __version__
from budgettune.core.engine_defaults import default_budget_on
from budgettune.core.errors import BudgettuneError, SpecError
from budgettune.core.hardware import GPU, ModelShape, dtype_bytes, resolve_gpu, resolve_model
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback
from budgettune.engines.embedded.core import LiveRequest, SimCore
from budgettune.engines.embedded.http11 import (
    Request,
    serve_connection,
    start_chunked,
    write_body,
    write_json,
)
from budgettune.engines.process import launch_process
from budgettune.engines.prometheus import EngineMetrics
from budgettune.model.stepmodel import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_OVERHEAD_S,
    StepModel,
)
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE, kv_capacity_blocks
from budgettune.sim.scheduler import Scheduler, SchedulerConfig

BYTES_PER_TEXT_TOKEN = 4  # the usual ~4 characters per token of English BPE text
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_MAX_MODEL_LEN = 8192  # when the model shape does not say


@dataclass(slots=True, frozen=True)
class SimServerConfig:
    """The sim engine's settings. budget_tokens None means no chunking (prefill-first)."""

    budget_tokens: int | None = 2048
    max_num_seqs: int = 256
    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    dtype: str = "bfloat16"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int = DEFAULT_BLOCK_SIZE
    long_prefill_token_threshold: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    time_scale: float = 1.0
    stream_interval: int = 1
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    overhead_ms: float = DEFAULT_OVERHEAD_S * 1e3
    mode: str = "overlapped"
    emission_log: Path | None = None
    profile: Path | None = None  # a `budgettune profile` file: its calibrated model, not presets


@dataclass(slots=True, frozen=True)
class ProfiledModel:
    """What a profile file gives a simulator: the calibrated step model, the shape, and the GPU
    whose memory sizes the KV cache."""

    step_model: StepModel
    shape: ModelShape
    gpu: GPU
    tensor_parallel: int
    dtype: str
    description: str  # for banners: "profile FILE (measured, vllm on CPU NAME)"
    knee_found: bool  # False: the measurements showed no ridge; F/B is only the fit's ratio


def profiled_model(path: Path | str, gpu: str) -> ProfiledModel:
    """Load a profile for ``--profile``. Its fitted F, B, t0 and mode replace the presets.

    KV-cache capacity needs GPU memory, which a profile does not record: the GPU preset the
    profile's hardware matches (an analytic profile, or an H100 recognised by name) is used,
    else the ``gpu`` preset (``--gpu``; a CPU profile sizes its cache as on that GPU).
    Raises SpecError (exit 2) for an unreadable file or a profile without a step fit.
    """
    from budgettune.model.profile import load_profile, match_gpu_preset, profile_step_model

    profile = load_profile(path)
    step_model = profile_step_model(profile)
    preset = profile.hardware.preset or (
        match_gpu_preset(profile.hardware.name) if profile.hardware.kind != "cpu" else None
    )
    card = resolve_gpu(preset or gpu)
    settings = profile.engine.settings
    tensor_parallel = int(
        settings.get("tensor_parallel") or settings.get("tensor_parallel_size") or 1
    )
    where = f"{profile.hardware.kind} {profile.hardware.name}"
    return ProfiledModel(
        step_model=step_model,
        shape=profile.model.shape,
        gpu=card,
        tensor_parallel=tensor_parallel,
        dtype=profile.model.dtype,
        description=f"profile {path} ({profile.kind}, {profile.engine.name} on {where})",
        knee_found=profile.ridge is None or profile.ridge.knee_found,
    )


class ApiError(Exception):
    """A request we refuse, answered as vLLM does: JSON {object: error, message, type, code}."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind

    def document(self) -> dict[str, Any]:
        return {
            "object": "error",
            "message": str(self),
            "type": self.kind,
            "param": None,
            "code": self.status,
        }


def prompt_token_count(prompt: Any) -> int:
    """Tokens of a prompt: a list of ids counts its length; text counts ceil(UTF-8 bytes / 4).
    A one-element batch is unwrapped; real batches are refused."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError("Prompt cannot be empty")
        return max(1, math.ceil(len(prompt.encode("utf-8")) / BYTES_PER_TEXT_TOKEN))
    if isinstance(prompt, list):
        if not prompt:
            raise ApiError("Prompt cannot be empty")
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return len(prompt)
        if all(isinstance(p, (list, str)) for p in prompt):
            raise ApiError("batched prompts are not supported by the simulated engine")
        raise ApiError("prompt must be a string or a list of non-negative token ids")
    if prompt is None:
        raise ApiError("'prompt' is required")
    raise ApiError("prompt must be a string or a list of non-negative token ids")


class SimApp:
    """Routes and request validation; the core does the serving."""

    def __init__(self, core: SimCore, *, model_name: str, max_model_len: int) -> None:
        self.core = core
        self.model_name = model_name
        self.max_model_len = max_model_len

    async def handle(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        try:
            return await self._route(request, reader, writer)
        except ApiError as error:
            write_json(writer, error.status, error.document())
            return True
        except Exception:  # a bug must cost one request, never the server
            traceback.print_exc()
            internal = ApiError("internal error", 500, "InternalServerError")
            write_json(writer, 500, internal.document())
            return False

    async def _route(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        path, method = request.path, request.method
        gets: dict[str, Callable[[asyncio.StreamWriter], None]] = {
            "/health": lambda w: write_body(w, 200, b""),
            "/v1/models": self._models,
            "/version": lambda w: write_json(w, 200, {"version": __version__, "engine": "sim"}),
            "/metrics": lambda w: write_body(
                w, 200, self._metrics_text().encode(), content_type="text/plain; version=0.0.4"
            ),
        }
        if path == "/v1/completions":
            if method != "POST":
                raise ApiError(f"Method {method} not allowed", 405, "MethodNotAllowed")
            return await self._completions(request, reader, writer)
        if path in gets:
            if method not in ("GET", "HEAD"):
                raise ApiError(f"Method {method} not allowed", 405, "MethodNotAllowed")
            gets[path](writer)
            return True
        write_json(writer, 404, {"detail": "Not Found"})
        return True

    def _models(self, writer: asyncio.StreamWriter) -> None:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "budgettune",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        write_json(writer, 200, {"object": "list", "data": [card]})

    def _metrics_text(self) -> str:
        return (
            self.core.metrics.render()
            + "\n".join(self.core.lateness.render(f'model_name="{self.model_name}"'))
            + "\n"
        )

    def _parse(self, body_bytes: bytes) -> tuple[int, int, bool, bool, bool]:
        """Validate a completion request: (prompt tokens, max tokens, stream, usage, continuous)."""
        try:
            body = json.loads(body_bytes)
        except ValueError as exc:
            raise ApiError(f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError("The request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ApiError(f"The model `{model}` does not exist.", 404, "NotFoundError")
        prompt_tokens = prompt_token_count(body.get("prompt"))
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ApiError(f"max_tokens must be at least 1, got {max_tokens!r}.")
        if body.get("n", 1) != 1:
            raise ApiError("n > 1 is not supported by the simulated engine")
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        if options is not None and not stream:
            raise ApiError("Stream options can only be defined when `stream=True`.")
        options = options if isinstance(options, dict) else {}
        total = prompt_tokens + max_tokens
        if total > self.max_model_len:
            raise ApiError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {total} tokens ({prompt_tokens} in the messages, {max_tokens} in "
                "the completion). Please reduce the length of the messages or completion."
            )
        reason = self.core.scheduler.rejection(prompt_tokens, max_tokens)
        if reason is not None:
            raise ApiError(f"The request cannot fit the KV cache: {reason}")
        include_usage = bool(options.get("include_usage", False))
        continuous = bool(options.get("continuous_usage_stats", False))
        return prompt_tokens, max_tokens, stream, include_usage, continuous

    async def _completions(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        prompt_tokens, max_tokens, stream, include_usage, continuous = self._parse(request.body)
        live = LiveRequest(
            rid=self.core.new_id(),
            writer=writer,
            reader=reader,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            stream=stream,
            include_usage=include_usage,
            continuous_usage=continuous,
            arrival_s=time.monotonic(),
        )
        if stream:
            start_chunked(writer)
        self.core.submit(live)
        await live.done
        return not writer.is_closing()


def build(config: SimServerConfig) -> tuple[SimCore, SimApp, str]:
    """Construct the scheduler, step model, metrics, core and app; returns them and a banner.
    Raises SpecError for bad presets or settings."""
    if not config.time_scale > 0:
        raise SpecError(f"--time-scale: must be positive, got {config.time_scale}")
    if config.stream_interval < 1:
        raise SpecError(f"--stream-interval: must be at least 1, got {config.stream_interval}")
    tensor_parallel = 1
    dtype = config.dtype
    source = "presets"
    if config.profile is not None:
        # --model, --dtype and the efficiency flags give way to the profile's calibrated model.
        profiled = profiled_model(config.profile, config.gpu)
        shape, gpu, step_model = profiled.shape, profiled.gpu, profiled.step_model
        tensor_parallel, dtype, source = (
            profiled.tensor_parallel,
            profiled.dtype,
            profiled.description,
        )
    else:
        shape = resolve_model(config.model)
        gpu = resolve_gpu(config.gpu)
        step_model = StepModel.from_hardware(
            shape,
            gpu,
            bytes_per_weight=dtype_bytes(config.dtype),
            compute_efficiency=config.compute_efficiency,
            bandwidth_efficiency=config.bandwidth_efficiency,
            overhead_s=config.overhead_ms / 1e3,
            mode=config.mode,
        )
    blocks = kv_capacity_blocks(
        step_model,
        gpu,
        gpu_memory_utilization=config.gpu_memory_utilization,
        block_size=config.block_size,
        tensor_parallel=tensor_parallel,
    )
    scheduler = Scheduler(
        SchedulerConfig(
            budget_tokens=config.budget_tokens,
            kv_capacity_blocks=blocks,
            max_num_seqs=config.max_num_seqs,
            block_size=config.block_size,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
        )
    )
    max_len = config.max_model_len or shape.max_position_embeddings or DEFAULT_MAX_MODEL_LEN
    if max_len < 2:
        raise SpecError(f"--max-model-len: must be at least 2, got {max_len}")
    name = config.served_model_name or shape.name
    metrics = EngineMetrics(model_name=name)
    core = SimCore(
        scheduler,
        step_model,
        metrics,
        model_name=name,
        time_scale=config.time_scale,
        stream_interval=config.stream_interval,
    )
    budget = "off (prefill-first)" if config.budget_tokens is None else config.budget_tokens
    banner = (
        f"budgettune {__version__} sim engine: {shape.name} on {gpu.name} ({dtype}), "
        f"budget {budget}, max_num_seqs {config.max_num_seqs}, max_model_len {max_len}, "
        f"KV {blocks} blocks of {config.block_size}, ridge {step_model.ridge_tokens:.0f} tokens, "
        f"time scale {config.time_scale:g}; step model from {source}"
    )
    return core, SimApp(core, model_name=name, max_model_len=max_len), banner


PARENT_PID_VAR = "BUDGETTUNE_PARENT_PID"


async def _stop_when_orphaned(stop: asyncio.Event) -> None:
    """When budgettune launched this server (it sets BUDGETTUNE_PARENT_PID), stop as soon as that
    process is gone: a second line of defence beside the parent-death signal, so no engine
    outlives the budgettune that started it."""
    text = os.environ.get(PARENT_PID_VAR, "")
    if not text.isdigit():
        return
    parent = int(text)
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(0.5)


async def serve(
    config: SimServerConfig,
    *,
    on_ready: Callable[[str, str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> str:
    """Serve until ``stop`` is set or SIGINT/SIGTERM arrives; returns the loop-timing summary.

    ``on_ready(url, banner)`` is called once the socket listens. Raises SpecError for bad
    settings and OSError when the port cannot be bound.
    """
    core, app, banner = build(config)
    stop = stop or asyncio.Event()
    log: IO[str] | None = None
    if config.emission_log is not None:
        log = open(config.emission_log, "w", buffering=1 << 20)  # noqa: SIM115 (closed below)
        log.write("request,tokens,time_s\n")
        core.emission_log = log
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    server = await asyncio.start_server(
        lambda r, w: serve_connection(r, w, app.handle), config.host, config.port, backlog=4096
    )
    runner = asyncio.create_task(core.run())
    stopper = asyncio.create_task(stop.wait())
    watchdog = asyncio.create_task(_stop_when_orphaned(stop))
    try:
        if on_ready is not None:
            on_ready(f"http://{config.host}:{config.port}", banner)
        await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if runner.done():
            runner.result()  # re-raise the core's crash
    finally:
        server.close()
        for task in (runner, stopper, watchdog):
            task.cancel()
        await asyncio.gather(runner, stopper, watchdog, return_exceptions=True)
        for sig in handled:
            loop.remove_signal_handler(sig)
        if log is not None:
            log.close()
    return core.lateness_summary()


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
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    except OSError as error:
        print(f"error: cannot listen: {error}", file=sys.stderr, flush=True)
        return 1
    print(f"stopped; {summary}", flush=True)
    return 0


class SimEngine:
    """Launches the sim server as a subprocess, exactly as a real engine is launched."""

    name = "sim"
    health_path = "/health"

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        base = list(spec.engine_cmd or (sys.executable, "-m", "budgettune.engines.embedded"))
        cmd = [*base, "--host", spec.host, "--port", str(port)]
        if spec.budget_tokens is not None:
            cmd += ["--max-num-batched-tokens", str(spec.budget_tokens)]
        if not spec.chunked_prefill:
            cmd.append("--no-enable-chunked-prefill")
        if spec.max_num_seqs is not None:
            cmd += ["--max-num-seqs", str(spec.max_num_seqs)]
        if spec.model is not None:
            cmd += ["--model", spec.model]
        if spec.gpu is not None:
            cmd += ["--gpu", spec.gpu]
        if spec.max_model_len is not None:
            cmd += ["--max-model-len", str(spec.max_model_len)]
        return cmd + list(spec.extra_args)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return {"PYTHONUNBUFFERED": "1", PARENT_PID_VAR: str(os.getpid()), **spec.env}

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        return launch_process(self, spec, on_progress)
