"""The embedded simulated engine's server: :func:`build` makes the scheduler, step model, core
and app from a :class:`~budgettune.engines.embedded.config.SimServerConfig`; :func:`serve` listens
and runs the core until stopped (a signal, the caller's event, or budgettune gone).

Run it as ``python -m budgettune.engines.embedded`` (:mod:`.cli`), as ``budgettune serve --engine
sim``, or launch it through :class:`~budgettune.engines.embedded.engine.SimEngine` like any other
engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import IO

from budgettune import __version__
from budgettune.core.errors import SpecError
from budgettune.core.files import check_overwrite, storage_error
from budgettune.core.hardware import check_model_len, dtype_bytes, resolve_gpu, resolve_model
from budgettune.engines.embedded.app import SimApp
from budgettune.engines.embedded.config import SimServerConfig
from budgettune.engines.embedded.core import SimCore
from budgettune.engines.embedded.engine import PARENT_PID_VAR
from budgettune.engines.embedded.http11 import MAX_BODY_BYTES, ConnectionLimits, serve_connection
from budgettune.engines.embedded.profiled import profiled_model
from budgettune.engines.prometheus import EngineMetrics
from budgettune.model.stepmodel import StepModel
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import Scheduler, SchedulerConfig

DEFAULT_MAX_MODEL_LEN = 8192  # when the model shape does not say


def build(config: SimServerConfig) -> tuple[SimCore, SimApp, str]:
    """Construct the scheduler, step model, metrics, core and app; returns them and a banner.
    Raises SpecError for bad presets or settings."""
    tensor_parallel = config.tensor_parallel
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
        calibration = config.calibration.resolve(gpu.name)
        step_model = StepModel.from_hardware(
            shape,
            gpu,
            calibration=calibration,
            bytes_per_weight=dtype_bytes(config.dtype),
            tensor_parallel=tensor_parallel,
        )
        source = f"presets, calibration {calibration.name} ({step_model.mode})"
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
            prefix_caching=config.prefix_caching,
        )
    )
    check_model_len(shape, config.max_model_len)
    max_len = config.max_model_len or shape.max_position_embeddings or DEFAULT_MAX_MODEL_LEN
    if max_len < 2:
        raise SpecError(f"must be at least 2, got {max_len}", field="max_model_len")
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
        f"budgettune {__version__} sim engine: {shape.name} on {gpu.name}"
        f"{f' x {tensor_parallel}' if tensor_parallel > 1 else ''} ({dtype}), "
        f"budget {budget}, max_num_seqs {config.max_num_seqs}, max_model_len {max_len}, "
        f"KV {blocks} blocks of {config.block_size}, "
        f"prefix caching {'on' if config.prefix_caching else 'off'}, "
        f"ridge {step_model.ridge_tokens:.0f} tokens, "
        f"time scale {config.time_scale:g}; step model from {source}"
    )
    if config.api_key:
        banner += "; API key required on /v1"
    app = SimApp(core, model_name=name, max_model_len=max_len, api_key=config.api_key)
    return core, app, banner


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


EMISSION_HEADER = "request,tokens,time_s\n"
# The largest body worth reading is a prompt as long as the context: a token id is at most 8
# characters and a comma, a text token 4 bytes, each up to 6 once JSON-escaped (\u00e9).
BODY_BYTES_PER_TOKEN = 32
BODY_BASE_BYTES = 64 * 1024


def body_limit_bytes(max_model_len: int) -> int:
    """The request body cap for a server of ``max_model_len`` tokens: room for a prompt that
    fills the context, at most MAX_BODY_BYTES (64 MiB). Bodies are buffered whole, so a lower
    cap is less memory per request held."""
    return min(MAX_BODY_BYTES, BODY_BASE_BYTES + BODY_BYTES_PER_TOKEN * max_model_len)


def open_emission_log(path: Path) -> IO[str]:
    """The emission CSV, its header written; over a file budgettune wrote only. Raises
    UserError (field ``emission_log``) for a path that cannot be written, StorageError for a
    full disk."""
    header = EMISSION_HEADER.encode()
    check_overwrite(path, lambda head: head.startswith(header), field="emission_log",
                    what="CSV file")  # fmt: skip
    try:
        log = open(path, "w", buffering=1 << 20)  # noqa: SIM115 (the caller closes it)
        log.write(EMISSION_HEADER)
    except OSError as error:
        raise storage_error(error, path, field="emission_log") from None
    return log


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
        log = open_emission_log(config.emission_log)
        core.emission_log = log
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    limits = ConnectionLimits(
        keep_alive_timeout_s=config.keep_alive_timeout_s,
        request_timeout_s=config.request_timeout_s,
        max_body_bytes=body_limit_bytes(app.max_model_len),
    )
    server = await asyncio.start_server(
        lambda r, w: serve_connection(r, w, app.handle, limits),
        config.host,
        config.port,
        backlog=4096,
    )
    runner = asyncio.create_task(core.run())
    stopper = asyncio.create_task(stop.wait())
    watchdog = asyncio.create_task(_stop_when_orphaned(stop))
    try:
        if on_ready is not None:
            # the port bound, not the one asked for: --port 0 asks the system for a free one
            port = server.sockets[0].getsockname()[1] if server.sockets else config.port
            on_ready(f"http://{config.host}:{port}", banner)
        await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if runner.done():
            try:
                runner.result()  # re-raise the core's crash
            except OSError as error:  # the one file the core writes: the emission log
                if config.emission_log is None:
                    raise
                raise storage_error(error, config.emission_log, field="emission_log") from None
    finally:
        server.close()
        for task in (runner, stopper, watchdog):
            task.cancel()
        await asyncio.gather(runner, stopper, watchdog, return_exceptions=True)
        for sig in handled:
            loop.remove_signal_handler(sig)
        if log is not None:
            _close_emission_log(log, config.emission_log)
    return core.lateness_summary()


def _close_emission_log(log: IO[str], path: Path | None) -> None:
    """Close the emission CSV; its last buffered rows are written now, so a full disk shows
    here too, and is named against the file, not the port."""
    try:
        log.close()
    except OSError as error:
        raise storage_error(error, path or Path("emission log"), field="emission_log") from None
