"""Render the recommended budget as files the user passes straight to their engine.

``vllm.yaml`` is read by ``vllm serve --config FILE`` (keys are the long flag names);
``sglang.args`` is one line of ``python -m sglang.launch_server`` arguments.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from budgettune.engines.sglang import MAX_PREFILL_TOKENS_DEFAULT


@dataclass(frozen=True, slots=True)
class FixedSettings:
    """What else the sweep ran the engine with (None: left at the engine's default), so the
    written config starts the engine the way it was measured. Prefix caching is not carried:
    the sweep turns it off only to keep replays honest."""

    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    dtype: str | None = None


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
        if value is not True:
            parts.append(shlex.quote(str(value)))
    return " ".join(parts) + "\n"


def vllm_settings(
    *,
    budget_tokens: int | None,
    max_num_seqs: int,
    model: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The vLLM flags a sweep fixed: budget (None = chunking off), max-num-seqs, and extras."""
    settings: dict[str, object] = {}
    if model is not None:
        settings["model"] = model
    if budget_tokens is None:
        settings["enable-chunked-prefill"] = False
    else:
        settings["enable-chunked-prefill"] = True
        settings["max-num-batched-tokens"] = budget_tokens
    settings["max-num-seqs"] = max_num_seqs
    settings.update(extra or {})
    return settings


def _vllm_fixed(fixed: FixedSettings) -> dict[str, object]:
    return {
        "max-model-len": fixed.max_model_len,
        "tensor-parallel-size": fixed.tensor_parallel_size,
        "gpu-memory-utilization": fixed.gpu_memory_utilization,
        "dtype": fixed.dtype,
    }


def _sglang_fixed(fixed: FixedSettings) -> dict[str, object]:
    return {
        "context-length": fixed.max_model_len,
        "tp-size": fixed.tensor_parallel_size,
        "mem-fraction-static": fixed.gpu_memory_utilization,
        "dtype": fixed.dtype,
    }


def sglang_settings(
    *,
    budget_tokens: int | None,
    max_num_seqs: int,
    model: str | None = None,
    extra: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The SGLang flags for the same choice (``--chunked-prefill-size -1`` disables chunking)."""
    settings: dict[str, object] = {}
    if model is not None:
        settings["model-path"] = model
    settings["chunked-prefill-size"] = -1 if budget_tokens is None else budget_tokens
    if budget_tokens is not None and budget_tokens > MAX_PREFILL_TOKENS_DEFAULT:
        settings["max-prefill-tokens"] = budget_tokens  # else SGLang cuts the budget silently
    settings["max-running-requests"] = max_num_seqs
    settings.update(extra or {})
    return settings


def write_engine_configs(
    run_dir: Path,
    *,
    budget_tokens: int | None,
    max_num_seqs: int,
    model: str | None = None,
    fixed: FixedSettings | None = None,
) -> tuple[Path, Path]:
    """Write ``vllm.yaml`` and ``sglang.args`` into ``run_dir``; returns their paths."""
    fixed = fixed or FixedSettings()
    vllm_path = run_dir / "vllm.yaml"
    sglang_path = run_dir / "sglang.args"
    vllm_path.write_text(
        vllm_config(
            vllm_settings(
                budget_tokens=budget_tokens,
                max_num_seqs=max_num_seqs,
                model=model,
                extra=_vllm_fixed(fixed),
            )
        )
    )
    sglang_path.write_text(
        sglang_args(
            sglang_settings(
                budget_tokens=budget_tokens,
                max_num_seqs=max_num_seqs,
                model=model,
                extra=_sglang_fixed(fixed),
            )
        )
    )
    return vllm_path, sglang_path
