"""The engines' scheduling defaults, written once: the token budget and running-sequence limit
vLLM, SGLang and TensorRT-LLM pick when the user passes neither, by GPU name and memory. It is the
fallback when the installed engine cannot be asked (see ``budgettune.engines.defaults_probe``),
and the rule the embedded engine follows for its GPU preset.

Sources (read in the engines' own code):
- vLLM 0.32, ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` (the API server's
  column): 16384 tokens / 1024 sequences on GPUs of 160 GiB or more; 8192 / 1024 from 70 GiB
  on cards other than A100; else 2048 / 256; vLLM's CPU build 2048 / 128 per tensor-parallel
  rank.
- SGLang 0.5.23, ``sglang/srt/arg_groups/memory_hook.py`` (memory in MiB): ``--chunked-prefill
  -size`` 2048 under 20 GiB, 4096 under 60 GiB, 8192 under 160 GiB, else 16384; 4096 when it
  sees no GPU. SGLang sizes ``--max-running-requests`` from its KV pool at start, so the table
  has no figure for it (None).
- TensorRT-LLM (``trtllm-serve``, ``tensorrt_llm/commands/serve.py``): ``--max_num_tokens``
  defaults to ``BuildConfig``'s 8192 on any GPU ("set to 8192 by default starting from v0.11",
  its performance-tuning guide), with chunked prefill off unless ``--enable_chunked_prefill``.
  Its batch-size default is not assumed (None).
"""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.hardware import GPU

_GIB = 1024**3
_MIB = 1024**2


@dataclass(frozen=True, slots=True)
class DefaultBudget:
    """An engine's defaults on one GPU and where they came from, in words (``rule``).

    ``max_num_seqs`` None: the engine sizes its running batch itself (SGLang)."""

    budget_tokens: int
    rule: str
    max_num_seqs: int | None = None


VLLM_RULE = (
    "vLLM 0.32's rule (budgettune's table): 16384 tokens / 1024 sequences from 160 GiB, "
    "8192 / 1024 from 70 GiB other than A100, else 2048 / 256"
)
VLLM_CPU_RULE = "vLLM 0.32's rule for its CPU build (budgettune's table): 2048 / 128"
TRTLLM_RULE = (
    "TensorRT-LLM's default (budgettune's table): --max_num_tokens 8192, chunked prefill off"
)
SGLANG_RULE = (
    "SGLang 0.5.23's rule (budgettune's table): 2048 under 20 GiB, 4096 under 60 GiB, "
    "8192 under 160 GiB, else 16384; 4096 without a GPU"
)


def default_budget(
    engine: str, gpu_name: str | None, memory_bytes: float | None, *, tensor_parallel: int = 1
) -> DefaultBudget:
    """``engine``'s defaults on a GPU named ``gpu_name`` (a preset such as ``a100-80g`` or
    nvidia-smi's "NVIDIA A100-SXM4-80GB") with ``memory_bytes`` of memory; None for either means
    no GPU (vLLM's CPU build, SGLang's no-GPU fallback). Engines other than SGLang follow vLLM's
    rule (the embedded engine mirrors vLLM); TensorRT-LLM has one default everywhere."""
    if engine == "sglang":
        return DefaultBudget(_sglang(memory_bytes), SGLANG_RULE)
    if engine == "trtllm":
        return DefaultBudget(8192, TRTLLM_RULE)
    if gpu_name is None or memory_bytes is None:
        ranks = max(1, tensor_parallel)
        return DefaultBudget(2048 * ranks, VLLM_CPU_RULE, max_num_seqs=128 * ranks)
    budget, seqs = _vllm(gpu_name, memory_bytes)
    return DefaultBudget(budget, VLLM_RULE, max_num_seqs=seqs)


def default_budget_on(engine: str, gpu: GPU | None) -> DefaultBudget:
    """:func:`default_budget` for a GPU preset (None: no GPU)."""
    if gpu is None:
        return default_budget(engine, None, None)
    return default_budget(engine, gpu.name, gpu.memory_bytes)


def _vllm(name: str, memory_bytes: float) -> tuple[int, int]:
    if memory_bytes >= 160 * _GIB:
        return 16384, 1024
    if memory_bytes >= 70 * _GIB and "a100" not in name.lower():
        return 8192, 1024
    return 2048, 256


def _sglang(memory_bytes: float | None) -> int:
    if memory_bytes is None:
        return 4096
    memory_mib = memory_bytes / _MIB
    if memory_mib < 20 * 1024:
        return 2048
    if memory_mib < 60 * 1024:
        return 4096
    return 8192 if memory_mib < 160 * 1024 else 16384
