"""The engines' default budgets: one table (core/engine_defaults.py) for every caller."""

from __future__ import annotations

from budgettune.core.engine_defaults import default_budget, default_budget_on
from budgettune.core.hardware import GPU_PRESETS


def budget(engine: str, preset: str | None) -> int:
    return default_budget_on(engine, None if preset is None else GPU_PRESETS[preset]).budget_tokens


def test_engine_defaults_follow_the_documented_rules() -> None:
    assert budget("vllm", "h100-sxm") == 8192
    assert budget("vllm", "a100-80g") == 2048  # A100 is excluded
    assert budget("vllm", "l40s") == 2048  # 48 GB < 70 GiB
    assert budget("vllm", None) == 2048
    assert budget("sglang", "a6000") == 8192  # 48 GB
    assert budget("sglang", "b200") == 16384  # 180 GB
    assert budget("sglang", None) == 2048


def test_the_a100_rule_reads_a_preset_and_an_nvidia_smi_name_alike() -> None:
    """The two copies this table replaced disagreed: ``startswith("a100")`` missed nvidia-smi's
    "NVIDIA A100-SXM4-80GB"; one rule now covers both spellings."""
    gib = 1024**3
    assert default_budget("vllm", "NVIDIA A100-SXM4-80GB", 80 * gib).budget_tokens == 2048
    assert default_budget("vllm", "a100-80g", 80 * gib).budget_tokens == 2048
    assert default_budget("vllm", "NVIDIA H100 80GB HBM3", 80 * gib).budget_tokens == 8192
    assert default_budget("sim", "h100-sxm", 80 * gib).budget_tokens == 8192  # sim mirrors vLLM
    assert "A100" in default_budget("vllm", None, None).rule
