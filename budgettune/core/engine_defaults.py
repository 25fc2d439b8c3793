"""The engines' default token budgets, written once: what vLLM and SGLang pick when the user
passes no budget, by GPU name and memory. The sweep's "what you run today" line, the embedded
engine's default and the detected-GPU line all read this table.

Sources (read in the engines' own code): vLLM's API server (``engine/arg_utils.py``: 8192 on
GPUs of at least 70 GiB other than A100, else 2048) and SGLang's ``server_args.py`` (by memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.hardware import GPU

_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class DefaultBudget:
    """An engine's default budget on one GPU and the rule that gave it, in words."""

    budget_tokens: int
    rule: str


VLLM_RULE = "vLLM: 8192 on GPUs of at least 70 GiB other than A100, else 2048"
SGLANG_RULE = "SGLang: 2048 under 35 GB of GPU memory, 8192 under 160 GB, else 16384"


def default_budget(engine: str, gpu_name: str | None, memory_bytes: float | None) -> DefaultBudget:
    """``engine``'s default budget on a GPU named ``gpu_name`` (a preset such as ``a100-80g`` or
    nvidia-smi's "NVIDIA A100-SXM4-80GB") with ``memory_bytes`` of memory; None for either means
    no GPU (the smallest default). Engines other than SGLang follow vLLM's rule (the embedded
    engine mirrors vLLM)."""
    if engine == "sglang":
        return DefaultBudget(_sglang(memory_bytes), SGLANG_RULE)
    return DefaultBudget(_vllm(gpu_name, memory_bytes), VLLM_RULE)


def default_budget_on(engine: str, gpu: GPU | None) -> DefaultBudget:
    """:func:`default_budget` for a GPU preset (None: no GPU)."""
    if gpu is None:
        return default_budget(engine, None, None)
    return default_budget(engine, gpu.name, gpu.memory_bytes)


def _vllm(name: str | None, memory_bytes: float | None) -> int:
    if name is None or memory_bytes is None:
        return 2048
    return 8192 if memory_bytes >= 70 * _GIB and "a100" not in name.lower() else 2048


def _sglang(memory_bytes: float | None) -> int:
    if memory_bytes is None:
        return 2048
    memory_gb = memory_bytes / 1e9
    if memory_gb < 35:
        return 2048
    return 8192 if memory_gb < 160 else 16384
