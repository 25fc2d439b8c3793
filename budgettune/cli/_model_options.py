"""The options every command that builds a step-time model from presets shares, defined once as
``Annotated`` typer options, and :data:`MODEL`: the group of them packed into a
:class:`~budgettune.app.requests.ModelRequest` (``roofline``, ``simulate``); ``serve`` uses some
of them one by one. The model itself is built in :mod:`budgettune.app.step_model`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgettune.app.requests import ModelRequest
from budgettune.cli._groups import OptionGroup

Model = Annotated[str, typer.Option(
    "--model", help="Model preset (llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2.5-7b, yi-34b, "
    "llama-2-13b), a Hugging Face config.json, or a model folder holding one.",
)]  # fmt: skip
GpuName = Annotated[str, typer.Option(
    "--gpu", help="GPU preset (h100-sxm, h100-pcie, h200, a100-80g, a100-40g, l40s, a6000, "
    "b200). Ignored when --peak-tflops, --bandwidth-tbs and --memory-gb describe a custom GPU.",
)]  # fmt: skip
PeakTflops = Annotated[float | None, typer.Option(
    "--peak-tflops",
    help="Custom GPU: peak dense bf16 TFLOP/s (with the two below; unset by default: --gpu).",
)]  # fmt: skip
BandwidthTbs = Annotated[float | None, typer.Option(
    "--bandwidth-tbs", help="Custom GPU: memory bandwidth, TB/s (unset by default)."
)]  # fmt: skip
MemoryGb = Annotated[float | None, typer.Option(
    "--memory-gb", help="Custom GPU: memory size, GB (unset by default)."
)]  # fmt: skip
Dtype = Annotated[str, typer.Option(
    "--dtype", help="Weight and KV-cache dtype (bytes per element from it)."
)]  # fmt: skip
TensorParallel = Annotated[int, typer.Option(
    "--tensor-parallel", min=1, help="GPUs the model is split over (pools FLOP/s, bandwidth)."
)]  # fmt: skip
ComputeEfficiency = Annotated[float, typer.Option(
    "--compute-efficiency", help="Achievable share of peak FLOP/s, 0-1."
)]  # fmt: skip
BandwidthEfficiency = Annotated[float, typer.Option(
    "--bandwidth-efficiency", help="Achievable share of peak memory bandwidth, 0-1."
)]  # fmt: skip
OverheadMs = Annotated[float, typer.Option(
    "--overhead-ms", help="Fixed per-iteration overhead t0 (scheduling, launches, sampling), ms."
)]  # fmt: skip
Mode = Annotated[str, typer.Option(
    "--mode", help="Step-time variant: overlapped (decode attention overlaps the matmuls, "
    "optimistic) or serialized (decode attention's KV reads add after them, pessimistic).",
)]  # fmt: skip
Profile = Annotated[Path | None, typer.Option(
    "--profile", help="A profile JSON from `budgettune profile` (or one shipped in profiles/): "
    "its calibrated step-time model replaces --model, --dtype, --tensor-parallel, the "
    "efficiency flags, --overhead-ms and --mode. The KV cache is sized on the GPU preset the "
    "profile names, else on --gpu. Unset by default: the analytic presets.",
)]  # fmt: skip

DEFAULTS = ModelRequest()  # the default of each option above

MODEL = OptionGroup(
    ModelRequest,
    {
        "model": Model,
        "gpu": GpuName,
        "peak_tflops": PeakTflops,
        "bandwidth_tbs": BandwidthTbs,
        "memory_gb": MemoryGb,
        "dtype": Dtype,
        "tensor_parallel": TensorParallel,
        "compute_efficiency": ComputeEfficiency,
        "bandwidth_efficiency": BandwidthEfficiency,
        "overhead_ms": OverheadMs,
        "mode": Mode,
    },
)
