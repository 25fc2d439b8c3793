"""The engines' defaults: one table (core/engine_defaults.py) for every caller, as vLLM 0.32's
``EngineArgs.get_batch_defaults`` and SGLang 0.5.23's ``memory_hook.py`` decide them."""

from __future__ import annotations

from budgettune.core.engine_defaults import default_budget, default_budget_on
from budgettune.core.hardware import GPU_PRESETS


def budget(engine: str, preset: str | None) -> int:
    return default_budget_on(engine, None if preset is None else GPU_PRESETS[preset]).budget_tokens


def seqs(engine: str, preset: str | None) -> int | None:
    return default_budget_on(engine, None if preset is None else GPU_PRESETS[preset]).max_num_seqs


def test_vllm_defaults_by_memory_and_name() -> None:
    assert (budget("vllm", "h100-sxm"), seqs("vllm", "h100-sxm")) == (8192, 1024)
    assert (budget("vllm", "h200"), seqs("vllm", "h200")) == (8192, 1024)  # 131 GiB
    assert (budget("vllm", "b200"), seqs("vllm", "b200")) == (16384, 1024)  # 168 GiB
    assert (budget("vllm", "a100-80g"), seqs("vllm", "a100-80g")) == (2048, 256)  # A100 excluded
    assert (budget("vllm", "l40s"), seqs("vllm", "l40s")) == (2048, 256)  # 48 GB < 70 GiB
    # No GPU: vLLM's CPU build, per tensor-parallel rank.
    assert (budget("vllm", None), seqs("vllm", None)) == (2048, 128)
    cpu_tp2 = default_budget("vllm", None, None, tensor_parallel=2)
    assert (cpu_tp2.budget_tokens, cpu_tp2.max_num_seqs) == (4096, 256)


def test_sglang_chunk_size_by_memory() -> None:
    assert budget("sglang", "a100-40g") == 4096  # 38 GiB: under 60 GiB (the old rule said 8192)
    assert budget("sglang", "l40s") == 4096
    assert budget("sglang", "a100-80g") == 8192
    assert budget("sglang", "h200") == 8192  # 131 GiB < 160 GiB
    assert budget("sglang", "b200") == 16384
    assert budget("sglang", None) == 4096  # no GPU
    assert default_budget("sglang", "T4", 15 * 1024**3).budget_tokens == 2048
    assert seqs("sglang", "h100-sxm") is None  # SGLang sizes its running batch from its KV pool


def test_the_a100_rule_reads_a_preset_and_an_nvidia_smi_name_alike() -> None:
    """The two copies this table replaced disagreed: ``startswith("a100")`` missed nvidia-smi's
    "NVIDIA A100-SXM4-80GB"; one rule now covers both spellings."""
    gib = 1024**3
    assert default_budget("vllm", "NVIDIA A100-SXM4-80GB", 80 * gib).budget_tokens == 2048
    assert default_budget("vllm", "a100-80g", 80 * gib).budget_tokens == 2048
    assert default_budget("vllm", "NVIDIA H100 80GB HBM3", 80 * gib).budget_tokens == 8192
    assert default_budget("sim", "h100-sxm", 80 * gib).budget_tokens == 8192  # sim mirrors vLLM
    assert "A100" in default_budget("vllm", "h100-sxm", 80 * gib).rule
