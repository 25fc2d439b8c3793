"""Typer options shared by every command that builds a step-time model from presets.

Use the constants as parameter defaults and :func:`step_model_from_options` to build the model,
so `roofline`, `simulate`, `serve --engine sim` and `sweep` read the same flags the same way.
"""

from __future__ import annotations

import typer

from budgettune.core.errors import SpecError
from budgettune.core.hardware import GPU, custom_gpu, dtype_bytes, resolve_gpu, resolve_model
from budgettune.model.stepmodel import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_OVERHEAD_S,
    MODES,
    StepModel,
)

MODEL = typer.Option(
    "llama-3.1-8b",
    "--model",
    help="Model preset (llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2.5-7b, yi-34b, "
    "llama-2-13b), a Hugging Face config.json, or a model folder holding one.",
)
GPU_NAME = typer.Option(
    "h100-sxm",
    "--gpu",
    help="GPU preset (h100-sxm, h100-pcie, h200, a100-80g, a100-40g, l40s, a6000, b200). "
    "Ignored when --peak-tflops, --bandwidth-tbs and --memory-gb describe a custom GPU.",
)
PEAK_TFLOPS = typer.Option(
    None,
    "--peak-tflops",
    help="Custom GPU: peak dense bf16 TFLOP/s (with the two below; unset by default: --gpu).",
)
BANDWIDTH_TBS = typer.Option(
    None, "--bandwidth-tbs", help="Custom GPU: memory bandwidth, TB/s (unset by default)."
)
MEMORY_GB = typer.Option(
    None, "--memory-gb", help="Custom GPU: memory size, GB (unset by default)."
)
DTYPE = typer.Option(
    "bfloat16", "--dtype", help="Weight and KV-cache dtype (bytes per element from it)."
)
TENSOR_PARALLEL = typer.Option(
    1, "--tensor-parallel", min=1, help="GPUs the model is split over (pools FLOP/s, bandwidth)."
)
COMPUTE_EFFICIENCY = typer.Option(
    DEFAULT_COMPUTE_EFFICIENCY,
    "--compute-efficiency",
    help="Achievable share of peak FLOP/s, 0-1.",
)
BANDWIDTH_EFFICIENCY = typer.Option(
    DEFAULT_BANDWIDTH_EFFICIENCY,
    "--bandwidth-efficiency",
    help="Achievable share of peak memory bandwidth, 0-1.",
)
OVERHEAD_MS = typer.Option(
    DEFAULT_OVERHEAD_S * 1e3,
    "--overhead-ms",
    help="Fixed per-iteration overhead t0 (scheduling, launches, sampling), ms.",
)
MODE = typer.Option(
    "overlapped",
    "--mode",
    help="Step-time variant: overlapped (decode attention overlaps the matmuls, optimistic) or "
    "serialized (decode attention's KV reads add after them, pessimistic).",
)
PROFILE = typer.Option(
    None,
    "--profile",
    help="A profile JSON from `budgettune profile` (or one shipped in profiles/): its calibrated "
    "step-time model replaces --model, --dtype, --tensor-parallel, the efficiency flags, "
    "--overhead-ms and --mode. The KV cache is sized on the GPU preset the profile names, "
    "else on --gpu. Unset by default: the analytic presets.",
)


def gpu_from_options(
    gpu: str, peak_tflops: float | None, bandwidth_tbs: float | None, memory_gb: float | None
) -> GPU:
    """The custom GPU when all three figures are given, else the preset; half a custom GPU is
    an error naming the missing flags."""
    custom = {
        "--peak-tflops": peak_tflops,
        "--bandwidth-tbs": bandwidth_tbs,
        "--memory-gb": memory_gb,
    }
    given = [name for name, value in custom.items() if value is not None]
    if not given:
        return resolve_gpu(gpu)
    if len(given) < 3:
        missing = [name for name in custom if name not in given]
        raise SpecError(f"a custom GPU needs {', '.join(missing)} as well as {', '.join(given)}")
    assert peak_tflops is not None and bandwidth_tbs is not None and memory_gb is not None
    return custom_gpu(peak_tflops, bandwidth_tbs, memory_gb)


def step_model_from_options(
    *,
    model: str,
    gpu: GPU,
    dtype: str,
    tensor_parallel: int,
    compute_efficiency: float,
    bandwidth_efficiency: float,
    overhead_ms: float,
    mode: str,
) -> StepModel:
    """Validate the flags and build the roofline :class:`StepModel`."""
    for option, value in (
        ("--compute-efficiency", compute_efficiency),
        ("--bandwidth-efficiency", bandwidth_efficiency),
    ):
        if not 0 < value <= 1:
            raise SpecError(f"{option}: must be in (0, 1], got {value!r}")
    if not overhead_ms >= 0:
        raise SpecError(f"--overhead-ms: must be zero or positive, got {overhead_ms!r}")
    if mode not in MODES:
        raise SpecError(f"--mode: unknown variant {mode!r}; use one of: {', '.join(MODES)}")
    return StepModel.from_hardware(
        resolve_model(model),
        gpu,
        bytes_per_weight=dtype_bytes(dtype),
        compute_efficiency=compute_efficiency,
        bandwidth_efficiency=bandwidth_efficiency,
        overhead_s=overhead_ms / 1e3,
        mode=mode,
        tensor_parallel=tensor_parallel,
    )
