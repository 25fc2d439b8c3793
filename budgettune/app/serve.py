"""``budgettune serve``: the embedded simulated engine's config from the command's options (the
budget given, else the engine-default rule on the GPU), and the server run until Ctrl-C."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable

from budgettune.app.launch import check_budgets_hold_seqs, prefix_caching_choice
from budgettune.app.requests import ServeRequest
from budgettune.app.simulate import parse_budgets
from budgettune.core.engine_defaults import default_budget_on
from budgettune.core.errors import EngineError, SpecError
from budgettune.core.hardware import resolve_gpu
from budgettune.core.units import parse_tokens
from budgettune.engines.embedded.config import SimServerConfig

SERVABLE = ("sim",)
# bind errors that blame the address, not the port (socket.gaierror has no errno of its own)
_ADDRESS_ERRNOS = frozenset({errno.EADDRNOTAVAIL, -2, -3, -5})


def server_config(request: ServeRequest) -> SimServerConfig:
    """The simulated engine's config: the engine must be one ``serve`` runs, the budget one
    budget (``none``: no chunking; unset: the engine-default rule on the GPU). Raises
    SpecError naming the field."""
    if request.engine.strip().lower() not in SERVABLE:
        raise SpecError(
            f"`serve` runs {', '.join(SERVABLE)}; got {request.engine!r} "
            "(launch vLLM or SGLang with their own commands)",
            field="engine",
        )
    budget = request.budget
    defaults = default_budget_on("sim", resolve_gpu(request.gpu))
    request.calibration.resolve(request.gpu)  # a bad calibration or figure fails here
    if budget is None:
        budget_tokens: int | None = defaults.budget_tokens
    else:
        budgets = parse_budgets(budget, field="budget")
        if len(budgets) != 1:
            raise SpecError(f"one budget, got {budget!r}", field="budget")
        budget_tokens = budgets[0]
    if budget_tokens is not None:  # the built-in engine refuses what vLLM refuses
        check_budgets_hold_seqs("sim", [budget_tokens], request.max_num_seqs, field="budget")
    max_model_len = request.max_model_len
    return SimServerConfig(
        budget_tokens=budget_tokens,
        max_num_seqs=request.max_num_seqs or defaults.max_num_seqs or 256,
        model=request.model,
        gpu=request.gpu,
        dtype=request.dtype,
        tensor_parallel=request.tensor_parallel,
        max_model_len=parse_tokens(max_model_len, field="max_model_len") if max_model_len else None,
        gpu_memory_utilization=request.gpu_memory_utilization,
        block_size=request.block_size,
        long_prefill_token_threshold=request.long_prefill_token_threshold,
        prefix_caching=bool(prefix_caching_choice(request.prefix_caching, "sim").on),
        host=request.host,
        port=request.port,
        served_model_name=request.served_model_name,
        time_scale=request.time_scale,
        stream_interval=request.stream_interval,
        calibration=request.calibration,
        emission_log=request.emission_log,
        profile=request.profile,
        api_key=request.api_key or None,
    )


def serve_until_stopped(config: SimServerConfig, on_ready: Callable[[str, str], None]) -> str:
    """Serve until Ctrl-C; returns the server's one-line summary. Raises EngineError (field
    ``port``) when the address cannot be listened on."""
    from budgettune.engines.embedded.server import serve

    try:
        return str(asyncio.run(serve(config, on_ready=on_ready)))
    except OSError as exc:  # the bind: a port in use, an address this machine does not have
        raise EngineError(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}",
            field="host" if exc.errno in _ADDRESS_ERRNOS or exc.strerror is None else "port",
        ) from None
