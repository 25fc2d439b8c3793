"""``--engine-config FILE``: the user's own engine config (``vllm serve --config``, or SGLang's
``--config``), checked once and read into the request. A key budgettune sets itself is refused
(the budget, max-num-seqs when tuned, the address), and so is a key also given as a flag; the
settings budgettune models (the model, max-num-seqs, max-model-len, tensor parallelism, the
memory share, the dtype) become the request's own, so that predictions, the launch and the
written config all see them. Every launch then passes the file whole (``--config``), and the
written config is the file with the answer set (:mod:`budgettune.artifacts.engine_config`). Each
engine's spelling of those keys is its own module's (``CONFIG_KEYS``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

from budgettune.app.launch import config_keys_for, resolve_engine
from budgettune.app.requests import LaunchRequest, TrafficRequest
from budgettune.core.errors import UserError, shorten
from budgettune.engines.base import ConfigFileKeys
from budgettune.engines.config_file import (
    EngineConfigFile,
    check_config_keys,
    flag_name,
    read_engine_config,
)

SEQS_TUNED = "--max-num-seqs with several values or auto (tuned with the budget); not in the file"

Request = TypeVar("Request")


def managed_keys(keys: ConfigFileKeys, *, tunes_seqs: bool) -> dict[str, str]:
    """Keys budgettune sets on every launch, never the file's (flag -> the option to use
    instead)."""
    managed = {f"--{k}": why for k, why in keys.managed.items()}
    managed[f"--{keys.budget}"] = "--budgets (sweep) or --budget (replay)"
    if tunes_seqs:
        managed[f"--{keys.max_num_seqs}"] = SEQS_TUNED
    return managed


def with_engine_config(request: Request, *, tunes_seqs: bool = False) -> Request:
    """``request`` (a sweep's or a replay's, with ``launch`` and ``traffic`` groups) with the
    modelled settings of its ``--engine-config`` taken in; unchanged without one. Raises
    UserError naming the key for a managed key or one also given as a flag."""
    launch: LaunchRequest = request.launch  # type: ignore[attr-defined]
    traffic: TrafficRequest = request.traffic  # type: ignore[attr-defined]
    if launch.engine_config is None:
        return request
    client = getattr(request, "client", None)
    engine, _ = resolve_engine(launch.engine, getattr(client, "url", None), launch.engine_cmd)
    keys = config_keys_for(engine)
    config = read_engine_config(launch.engine_config, suffixes=keys.suffixes)
    check_config_keys(
        config, managed_keys(keys, tunes_seqs=tunes_seqs), _given(launch, traffic, keys)
    )
    found = modelled_settings(config, keys)
    max_model_len = found.pop("max_model_len", None)
    if "max_num_seqs" in found:  # the request keeps --max-num-seqs as text (it takes a list)
        found["max_num_seqs"] = str(found["max_num_seqs"])
    new_launch = dataclasses.replace(launch, **found)
    new_traffic = (
        traffic
        if max_model_len is None
        else dataclasses.replace(traffic, max_model_len=max_model_len)
    )
    return dataclasses.replace(request, launch=new_launch, traffic=new_traffic)  # type: ignore[type-var]


@dataclasses.dataclass(slots=True, frozen=True)
class ProfileFileSettings:
    """What ``profile --engine-config`` takes from the file: its path (every launch reads it)
    and the settings that change an iteration's time, None where the file is silent."""

    path: Path
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None


def profile_engine_config(
    path: Path, engine: str, *, model: str, dtype: str, tensor_parallel: int
) -> ProfileFileSettings:
    """The user's file as a profile's engine reads it. The keys a sweep refuses are refused
    here too, so one file serves both; a setting also given as a flag is refused (the model only
    when the file names another). The profile's own probes set max-num-seqs, max-model-len and
    the prefix cache (off) on the command line, which wins over the file."""
    keys = config_keys_for(engine)
    config = read_engine_config(path, suffixes=keys.suffixes)
    given: dict[str, str] = {}
    for flags, value, option in (
        (keys.dtype, None if dtype == "auto" else dtype, "--dtype"),
        (keys.tensor_parallel_size, None if tensor_parallel == 1 else tensor_parallel,
         "--tensor-parallel-size"),
    ):  # fmt: skip
        if value is not None:
            given.update({f"--{flag}": f"{option} {value}" for flag in flags})
    for flag in keys.model:
        if config.has(flag) and str(config.value(flag)) != model:
            given[f"--{flag}"] = f"--model {model}"
    check_config_keys(config, managed_keys(keys, tunes_seqs=False), given)
    found = modelled_settings(config, keys)
    return ProfileFileSettings(
        path=config.path,
        dtype=found.get("dtype"),
        tensor_parallel_size=found.get("tensor_parallel_size"),
        gpu_memory_utilization=found.get("gpu_memory_utilization"),
    )


def modelled_settings(config: EngineConfigFile, keys: ConfigFileKeys) -> dict[str, Any]:
    """The settings budgettune models that the file gives, checked, by the request's field name
    (model, dtype, max_num_seqs, tensor_parallel_size, gpu_memory_utilization, max_model_len),
    whichever of the engine's spellings the file uses."""
    readers = (
        ("model", keys.model, _text),
        ("dtype", keys.dtype, _text),
        ("max_num_seqs", (keys.max_num_seqs,), _whole),
        ("tensor_parallel_size", keys.tensor_parallel_size, _whole),
        ("gpu_memory_utilization", keys.gpu_memory_utilization, _share),
        ("max_model_len", keys.max_model_len, _text),  # as written ("8k"): parsed with the option
    )
    found: dict[str, Any] = {}
    for field_name, flags, read in readers:
        for flag in flags:
            if config.has(flag):
                found[field_name] = read(config, flag)
    return found


def _given(launch: LaunchRequest, traffic: TrafficRequest, keys: ConfigFileKeys) -> dict[str, str]:
    """Flags the user gave budgettune that set the same thing as a file key."""
    given: dict[str, str] = {}
    for flags, value, option in (
        (keys.model, launch.model, "--model"),
        ((keys.max_num_seqs,), launch.max_num_seqs, "--max-num-seqs"),
        (keys.dtype, launch.dtype, "--dtype"),
        (keys.tensor_parallel_size, launch.tensor_parallel_size, "--tensor-parallel-size"),
        (keys.gpu_memory_utilization, launch.gpu_memory_utilization, "--gpu-memory-utilization"),
        (keys.max_model_len, traffic.max_model_len, "--max-model-len"),
    ):
        if value is not None:
            for flag in flags:
                given[f"--{flag}"] = f"{option} {value}"
    if launch.prefix_caching.strip().lower() != "engine":
        for switch in (keys.prefix_on, keys.prefix_off):
            if switch is not None:
                given[f"--{switch}"] = f"--prefix-caching {launch.prefix_caching}"
    for item in launch.engine_arg:
        for word in item.split():
            if word.startswith("--"):
                given[f"--{flag_name(word.split('=', 1)[0])}"] = f"--engine-arg {shorten(item)!r}"
    return given


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
        f"{config.path}: {config.spelled[flag]!r} must be {expected}, got {shorten(repr(value))}",
        field="engine_config",
    )
