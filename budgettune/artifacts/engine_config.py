"""Render the recommended budget as files the user passes straight to their engine.

``vllm.yaml`` is read by ``vllm serve --config FILE`` (keys are the long flag names);
``sglang.args`` is one line of ``python -m sglang.launch_server`` arguments; ``trtllm.yaml`` is
read by ``trtllm-serve MODEL --config FILE`` (keys are TensorRT-LLM's LLM-API arguments). Each
carries the budget and only what the user set (``--max-num-seqs``, ``--max-model-len``, ...):
every other setting stays the engine's default, as in the run that measured it. A sweep
measured on SGLang writes ``sglang.args``, one on TensorRT-LLM ``trtllm.yaml``, one on vLLM or
the simulated engine (vLLM's scheduling rules) ``vllm.yaml``: the engines schedule differently.
"""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from budgettune.core.auth import HIDDEN, secret_name
from budgettune.core.files import write_atomic
from budgettune.engines import sglang, vllm
from budgettune.engines.base import ConfigFileKeys
from budgettune.engines.config_file import flag_name, flag_settings
from budgettune.engines.sglang import MAX_PREFILL_TOKENS_DEFAULT
from budgettune.engines.trtllm import options_yaml


@dataclass(frozen=True, slots=True)
class FixedSettings:
    """What else the user ran the engine with (None: left at the engine's default), so the
    written config starts the engine the way it was measured. ``prefix_caching`` is set only
    where the measured engine ran otherwise than the engine's default (``--prefix-caching
    off`` on an engine that caches by default)."""

    max_num_seqs: int | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None
    prefix_caching: bool | None = None
    # The user's own engine config file (--engine-config), as text: vllm.yaml is that file with
    # the settings above and the budget set, its comments and everything else kept.
    base_config_text: str | None = None
    # The pass-through flags (--engine-arg) every launch ran with, carried into vLLM's and
    # SGLang's config (the built-in engine's are its own flags, not vLLM's; TensorRT-LLM's
    # options file has other names): the written config starts the engine that was measured.
    engine_args: tuple[str, ...] = ()


def vllm_config(settings: Mapping[str, object]) -> str:
    """YAML text for ``vllm serve --config``: one ``long-flag-name: value`` line each.

    ``settings`` maps flag names without dashes (``max-num-batched-tokens``) to values; booleans
    become ``true``/``false``, strings are JSON-quoted (valid YAML scalars), None is skipped.
    """
    lines = [
        "# Written by budgettune: pass to `vllm serve --config vllm.yaml` (flags on the command",
        "# line take precedence over this file).",
    ]
    for key, value in settings.items():
        if value is None:
            continue
        lines.append(f"{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"


def _yaml_scalar(value: object) -> str:
    if isinstance(value, list):  # a flag of several values, as a YAML flow list
        return "[" + ", ".join(_yaml_scalar(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def sglang_args(settings: Mapping[str, object]) -> str:
    """One shell-quoted line of ``--flag value`` pairs; True is a bare flag, False/None skip."""
    parts: list[str] = []
    for key, value in settings.items():
        if value is None or value is False:
            continue
        parts.append(f"--{key}")
        if isinstance(value, list):
            parts += [shlex.quote(str(item)) for item in value]
        elif value is not True:
            parts.append(shlex.quote(str(value)))
    return " ".join(parts) + "\n"


def vllm_settings(
    *,
    budget_tokens: int | None,
    model: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The vLLM flags for the choice: the budget (None = chunking off) and ``extra`` (what the
    user set; None values are left out)."""
    settings: dict[str, object] = {}
    if model is not None:
        settings["model"] = model
    if budget_tokens is None:
        settings["enable-chunked-prefill"] = False
    else:
        settings["max-num-batched-tokens"] = budget_tokens
    settings.update(extra or {})
    return settings


def _vllm_fixed(fixed: FixedSettings) -> dict[str, object]:
    return {
        "max-num-seqs": fixed.max_num_seqs,
        "max-model-len": fixed.max_model_len,
        "tensor-parallel-size": fixed.tensor_parallel_size,
        "gpu-memory-utilization": fixed.gpu_memory_utilization,
        "dtype": fixed.dtype,
        # vLLM's config reader drops a false boolean, so "off" is the negative flag set true.
        **_switch(fixed.prefix_caching, "enable-prefix-caching", "no-enable-prefix-caching"),
    }


def _switch(on: bool | None, on_flag: str, off_flag: str) -> dict[str, object]:
    """The one flag that sets a boolean (none when it is the engine's default, None)."""
    if on is None:
        return {}
    return {on_flag: True} if on else {off_flag: True}


def _sglang_fixed(fixed: FixedSettings) -> dict[str, object]:
    return {
        "max-running-requests": fixed.max_num_seqs,
        "context-length": fixed.max_model_len,
        "tp-size": fixed.tensor_parallel_size,
        "mem-fraction-static": fixed.gpu_memory_utilization,
        "dtype": fixed.dtype,
        # SGLang has no flag that turns its radix cache on: off is the only one carried.
        "disable-radix-cache": True if fixed.prefix_caching is False else None,
    }


def sglang_settings(
    *,
    budget_tokens: int | None,
    model: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The SGLang flags for the choice (``--chunked-prefill-size -1`` disables chunking) and
    ``extra`` (what the user set; None values are left out)."""
    settings: dict[str, object] = {}
    if model is not None:
        settings["model-path"] = model
    settings["chunked-prefill-size"] = -1 if budget_tokens is None else budget_tokens
    if budget_tokens is not None and budget_tokens > MAX_PREFILL_TOKENS_DEFAULT:
        # as the launcher does (engines/sglang.py): the prefill-batch bound never cuts it
        settings["max-prefill-tokens"] = budget_tokens
    settings.update(extra or {})
    return settings


def trtllm_settings(
    *, budget_tokens: int | None, extra: Mapping[str, object] | None = None
) -> dict[str, object]:
    """TensorRT-LLM's LLM-API arguments for the choice: ``max_num_tokens`` with
    ``enable_chunked_prefill`` (None = chunking off: the budget is then TensorRT-LLM's own) and
    ``extra`` (what the user set; None values are left out). The model is trtllm-serve's
    positional argument, so it is not in the file."""
    settings: dict[str, object] = {}
    if budget_tokens is None:
        settings["enable_chunked_prefill"] = False
    else:
        settings["max_num_tokens"] = budget_tokens
        settings["enable_chunked_prefill"] = True
    settings.update({k: v for k, v in (extra or {}).items() if v is not None})
    return settings


def _trtllm_fixed(fixed: FixedSettings) -> dict[str, object]:
    kv: dict[str, object] | None = None
    if fixed.gpu_memory_utilization is not None:
        kv = {"free_gpu_memory_fraction": fixed.gpu_memory_utilization}
    if fixed.prefix_caching is not None:
        kv = {**(kv or {}), "enable_block_reuse": fixed.prefix_caching}
    return {
        "max_batch_size": fixed.max_num_seqs,
        "max_seq_len": fixed.max_model_len,
        "tensor_parallel_size": fixed.tensor_parallel_size,
        "kv_cache_config": kv,
        "dtype": fixed.dtype,
    }


def trtllm_config(settings: Mapping[str, object], model: str | None) -> str:
    """YAML text for ``trtllm-serve MODEL --config trtllm.yaml``, headed by how to run it."""
    serve = f"trtllm-serve {model} --config trtllm.yaml" if model else "trtllm-serve MODEL ..."
    return (
        f"# Written by budgettune: pass to `{serve}` (this file overrides the command's flags).\n"
        + options_yaml(settings)
    )


def config_file_name(engine: str) -> str:
    """The engine config a sweep measured on ``engine`` writes: SGLang's for SGLang,
    TensorRT-LLM's for TensorRT-LLM, vLLM's for vLLM and the simulated engine (which schedules
    by vLLM's rules)."""
    return {"sglang": SGLANG_FILE, "trtllm": TRTLLM_FILE}.get(engine, VLLM_FILE)


# Engines whose pass-through flags are the same engine's flags as its written config's keys.
CARRIES_ENGINE_ARGS = ("vllm", "sglang")

VLLM_FILE = "vllm.yaml"
SGLANG_FILE = "sglang.args"
SGLANG_CONFIG_FILE = "sglang.yaml"  # the user's SGLang --config file with the answer set
TRTLLM_FILE = "trtllm.yaml"


def write_engine_config(
    run_dir: Path,
    *,
    engine: str,
    budget_tokens: int | None,
    model: str | None = None,
    fixed: FixedSettings | None = None,
) -> Path:
    """Write the config file for ``engine`` (see :func:`config_file_name`) into ``run_dir``;
    returns its path. Over the user's own file (``fixed.base_config_text``), SGLang's answer is
    that file with the answer set, ``sglang.yaml``, and ``sglang.args`` reads it."""
    fixed = fixed or FixedSettings()
    path = run_dir / config_file_name(engine)
    passed = flag_settings(fixed.engine_args) if engine in CARRIES_ENGINE_ARGS else {}
    if path.name == SGLANG_FILE:
        settings = sglang_settings(
            budget_tokens=budget_tokens, model=model, extra={**_sglang_fixed(fixed), **passed}
        )
        if fixed.base_config_text is None:
            write_atomic(path, sglang_args(settings))
        else:
            text = config_over(fixed.base_config_text, settings, sglang.CONFIG_KEYS)
            write_atomic(run_dir / SGLANG_CONFIG_FILE, text)
            write_atomic(path, sglang_args({"config": SGLANG_CONFIG_FILE}))
    elif path.name == TRTLLM_FILE:
        settings = trtllm_settings(budget_tokens=budget_tokens, extra=_trtllm_fixed(fixed))
        write_atomic(path, trtllm_config(settings, model))
    else:
        settings = vllm_settings(
            budget_tokens=budget_tokens, model=model, extra={**_vllm_fixed(fixed), **passed}
        )
        text = (
            vllm_config(settings)
            if fixed.base_config_text is None
            else config_over(fixed.base_config_text, settings, vllm.CONFIG_KEYS)
        )
        write_atomic(path, text)
    return path


def config_over(base: str, settings: Mapping[str, object], keys: ConfigFileKeys) -> str:
    """The user's own ``--config`` text with ``settings`` (flag names with dashes) set: a key the
    file already holds, in whatever spelling or alias the engine takes (``keys``: ``tp`` for
    ``tensor-parallel-size``), keeps its place and changes only when its value differs; a new
    one is appended; a credential's value (``hf-token``, ``api-key``) reads ``***``, as every
    file budgettune writes. Round-tripped by ruamel.yaml, so comments, order and the untouched
    lines stay as written."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a long line of the user's
    data = yaml.load(base)
    if data is None:
        data = CommentedMap()
    spelled = {flag_name(str(key)): key for key in data}
    for name, key in spelled.items():  # a run folder holds no credential: the --env rule
        if secret_name(name.replace("-", "_")):
            data[key] = HIDDEN
    same_setting = _aliases(keys)
    for flag, value in settings.items():
        if value is None:
            continue
        held = [spelled[name] for name in same_setting.get(flag, (flag,)) if name in spelled]
        if not held:
            data[flag] = value
        elif not _same(data[held[0]], value):
            data[held[0]] = value
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def _aliases(keys: ConfigFileKeys) -> dict[str, tuple[str, ...]]:
    """Each spelling of a setting the engine takes -> all of them (``tp`` and
    ``tensor-parallel-size`` set one thing)."""
    groups = (keys.model, keys.max_model_len, keys.tensor_parallel_size,
              keys.gpu_memory_utilization, keys.dtype)  # fmt: skip
    return {flag: group for group in groups for flag in group}


def _same(held: object, value: object) -> bool:
    """Whether the file's value is already ``value`` (a bool is never a number here)."""
    if isinstance(held, bool) or isinstance(value, bool):
        return isinstance(held, bool) and isinstance(value, bool) and held == value
    return held == value
