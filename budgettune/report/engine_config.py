"""Render the recommended budget as files the user passes straight to their engine.

``vllm.yaml`` is read by ``vllm serve --config FILE`` (keys are the long flag names);
``sglang.args`` is one line of ``python -m sglang.launch_server`` arguments.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path


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


def sglang_settings(
    *, budget_tokens: int | None, max_num_seqs: int, model: str | None = None
) -> dict[str, object]:
    """The SGLang flags for the same choice (``--chunked-prefill-size -1`` disables chunking)."""
    settings: dict[str, object] = {}
    if model is not None:
        settings["model-path"] = model
    settings["chunked-prefill-size"] = -1 if budget_tokens is None else budget_tokens
    settings["max-running-requests"] = max_num_seqs
    return settings


def write_engine_configs(
    run_dir: Path, *, budget_tokens: int | None, max_num_seqs: int, model: str | None = None
) -> tuple[Path, Path]:
    """Write ``vllm.yaml`` and ``sglang.args`` into ``run_dir``; returns their paths."""
    vllm_path = run_dir / "vllm.yaml"
    sglang_path = run_dir / "sglang.args"
    vllm_path.write_text(
        vllm_config(
            vllm_settings(budget_tokens=budget_tokens, max_num_seqs=max_num_seqs, model=model)
        )
    )
    sglang_path.write_text(
        sglang_args(
            sglang_settings(budget_tokens=budget_tokens, max_num_seqs=max_num_seqs, model=model)
        )
    )
    return vllm_path, sglang_path
