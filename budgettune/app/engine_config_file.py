"""``--engine-config FILE``: the user's own ``vllm serve --config`` file, checked once and read
into the request. A key budgettune sets itself is refused (the budget, max-num-seqs when tuned,
the address), and so is a key also given as a flag; the settings budgettune models (the model,
max-num-seqs, max-model-len, tensor parallelism, the memory share, the dtype) become the
request's own, so that predictions, the launch and the written config all see them. Every launch
then passes the file whole (``--config``), and the written ``vllm.yaml`` is the file with the
answer set (:mod:`budgettune.artifacts.engine_config`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from budgettune.app.requests import LaunchRequest, TrafficRequest
from budgettune.core.errors import UserError, shorten
from budgettune.engines.config_file import (
    EngineConfigFile,
    check_config_keys,
    flag_name,
    ignored_false_booleans,
    read_engine_config,
)

# Keys budgettune sets on every launch: never the file's (flag -> the option to use instead).
MANAGED_KEYS = {
    "--max-num-batched-tokens": "--budgets (the budget under test)",
    "--enable-chunked-prefill": "--budgets none",
    "--no-enable-chunked-prefill": "--budgets none",
    "--host": "nothing (budgettune serves on 127.0.0.1)",
    "--port": "nothing (budgettune picks a free port)",
    "--config": "one file",
}
SEQS_TUNED = "--max-num-seqs with several values or auto (tuned with the budget); not in the file"
PREFIX_KEYS = ("--enable-prefix-caching", "--no-enable-prefix-caching")

Request = TypeVar("Request")


def with_engine_config(
    request: Request, *, tunes_seqs: bool = False, warn: Callable[[str], None] | None = None
) -> Request:
    """``request`` (a sweep's or a replay's, with ``launch`` and ``traffic`` groups) with the
    modelled settings of its ``--engine-config`` taken in; unchanged without one. Raises
    UserError naming the key for a managed key or one also given as a flag; ``warn`` is told of
    keys vLLM will ignore (a ``false`` value)."""
    launch: LaunchRequest = request.launch  # type: ignore[attr-defined]
    traffic: TrafficRequest = request.traffic  # type: ignore[attr-defined]
    if launch.engine_config is None:
        return request
    config = read_engine_config(launch.engine_config)
    managed = dict(MANAGED_KEYS)
    if tunes_seqs:
        managed["--max-num-seqs"] = SEQS_TUNED
    check_config_keys(config, managed, _given(launch, traffic))
    for key in ignored_false_booleans(config):
        if warn is not None:
            warn(
                f"--engine-config {config.path}: vLLM drops '{key}: false' from a config file "
                f"(the flag keeps its default); write no-{flag_name(key)}: true to turn it off"
            )
    lifted_launch: dict[str, Any] = {}
    for flag, field in (("model", "model"), ("dtype", "dtype")):
        if config.has(flag):
            lifted_launch[field] = _text(config, flag)
    if config.has("max-num-seqs"):
        lifted_launch["max_num_seqs"] = str(_whole(config, "max-num-seqs"))
    for flag in ("tensor-parallel-size", "tp"):
        if config.has(flag):
            lifted_launch["tensor_parallel_size"] = _whole(config, flag)
    if config.has("gpu-memory-utilization"):
        lifted_launch["gpu_memory_utilization"] = _share(config, "gpu-memory-utilization")
    new_launch = dataclasses.replace(launch, **lifted_launch)
    new_traffic = traffic
    if config.has("max-model-len"):
        new_traffic = dataclasses.replace(traffic, max_model_len=str(config.value("max-model-len")))
    return dataclasses.replace(request, launch=new_launch, traffic=new_traffic)  # type: ignore[type-var]


def _given(launch: LaunchRequest, traffic: TrafficRequest) -> dict[str, str]:
    """Flags the user gave budgettune that set the same thing as a file key."""
    given: dict[str, str] = {}
    for flag, value, option in (
        ("--model", launch.model, "--model"),
        ("--max-num-seqs", launch.max_num_seqs, "--max-num-seqs"),
        ("--dtype", launch.dtype, "--dtype"),
        ("--tensor-parallel-size", launch.tensor_parallel_size, "--tensor-parallel-size"),
        ("--tp", launch.tensor_parallel_size, "--tensor-parallel-size"),
        ("--gpu-memory-utilization", launch.gpu_memory_utilization, "--gpu-memory-utilization"),
        ("--max-model-len", traffic.max_model_len, "--max-model-len"),
    ):
        if value is not None:
            given[flag] = f"{option} {value}"
    if launch.prefix_caching.strip().lower() != "engine":
        for flag in PREFIX_KEYS:
            given[flag] = f"--prefix-caching {launch.prefix_caching}"
    for item in launch.engine_arg:
        for word in item.split():
            if word.startswith("--"):
                given[f"--{flag_name(word.split('=', 1)[0])}"] = f"--engine-arg {shorten(item)!r}"
    return given


def file_prefix_caching(config: EngineConfigFile) -> tuple[bool | None, str]:
    """What the file says of the prefix cache, as vLLM reads it: (on, the key in words), or
    (None, "") when it says nothing vLLM acts on (a ``false`` value is dropped)."""
    if config.value("no-enable-prefix-caching") is True:
        return False, f"{config.spelled['no-enable-prefix-caching']}: true"
    if config.value("enable-prefix-caching") is True:
        return True, f"{config.spelled['enable-prefix-caching']}: true"
    return None, ""


def _text(config: EngineConfigFile, flag: str) -> str:
    value = config.value(flag)
    if not isinstance(value, str | int | float) or isinstance(value, bool) or str(value) == "":
        raise _bad(config, flag, "a name", value)
    return str(value)


def _whole(config: EngineConfigFile, flag: str) -> int:
    value = config.value(flag)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad(config, flag, "a whole number of at least 1", value)
    return value


def _share(config: EngineConfigFile, flag: str) -> float:
    value = config.value(flag)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
        raise _bad(config, flag, "a share within 0-1", value)
    return float(value)


def _bad(config: EngineConfigFile, flag: str, expected: str, value: object) -> UserError:
    return UserError(
        f"--engine-config {config.path}: {config.spelled[flag]!r} must be {expected}, got "
        f"{shorten(repr(value))}",
        field="engine_config",
    )
