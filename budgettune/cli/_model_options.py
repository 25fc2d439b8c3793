"""The options every command that builds a step-time model from presets shares, defined once as
``Annotated`` typer options, and :data:`MODEL`: the group of them packed into a
:class:`~budgettune.app.requests.ModelRequest` (``roofline``, ``simulate``), with
:data:`CALIBRATION` inside it (``serve`` and ``profile`` take that group alone); ``serve`` uses
some of the others one by one. The model itself is built in :mod:`budgettune.app.step_model`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgettune.app.requests import ModelRequest
from budgettune.cli._groups import OptionGroup
from budgettune.model.calibration import CalibrationChoice

Model = Annotated[str, typer.Option(
    "--model", help="Model preset (llama-3.1-8b, llama-3.1-70b, mistral-7b, qwen2.5-7b, "
    "qwen3-32b, yi-34b, llama-2-13b), a Hugging Face config.json, or a model folder holding one.",
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
# --tensor-parallel-size, as vLLM, SGLang, TensorRT-LLM and sweep spell it; --tensor-parallel,
# the first spelling here, still works.
TensorParallel = Annotated[int, typer.Option(
    "--tensor-parallel-size", "--tensor-parallel", min=1,
    help="GPUs the model is split over (pools FLOP/s, bandwidth).",
)]  # fmt: skip
Calibration = Annotated[str, typer.Option(
    "--calibration", help="Step-time model calibration: measured (per-GPU efficiencies fitted to "
    "NVIDIA AIConfigurator's silicon-measured vLLM database, the engine's accounting) or seed "
    "(the textbook roofline's: F = 0.6 of peak, B = 0.8, t0 = 0.5 ms, overlapped).",
)]  # fmt: skip
ComputeEfficiency = Annotated[float | None, typer.Option(
    "--compute-efficiency",
    help="Achievable share of peak FLOP/s, 0-1 (default: the calibration's).",
)]  # fmt: skip
BandwidthEfficiency = Annotated[float | None, typer.Option(
    "--bandwidth-efficiency", help="Achievable share of peak memory bandwidth streaming weights, "
    "0-1 (seed: the KV cache's too; default: the calibration's).",
)]  # fmt: skip
KvBandwidthEfficiency = Annotated[float | None, typer.Option(
    "--kv-bandwidth-efficiency", help="Achievable share of peak memory bandwidth reading the KV "
    "cache (decode attention), 0-1 (default: the calibration's).",
)]  # fmt: skip
OverheadMs = Annotated[float | None, typer.Option(
    "--overhead-ms", help="Fixed CPU time per iteration t0 (scheduling, launches, sampling), ms "
    "(default: the calibration's, 0.5).",
)]  # fmt: skip
Mode = Annotated[str | None, typer.Option(
    "--mode", help="Step-time variant: overlapped (decode attention overlaps the matmuls) or "
    "serialized (decode attention's KV reads add after them); default: the calibration's.",
)]  # fmt: skip
Profile = Annotated[Path | None, typer.Option(
    "--profile", help="A profile JSON from `budgettune profile` (or one shipped in profiles/): "
    "its calibrated step-time model replaces --model, --dtype, --tensor-parallel-size, "
    "--calibration, the efficiency flags, --overhead-ms and --mode. The KV cache is sized on "
    "the GPU preset the profile names, else on --gpu. Unset by default: the analytic presets.",
)]  # fmt: skip

DEFAULTS = ModelRequest()  # the default of each option above

# The calibration group: a calibration by name and the figures given instead of its own.
CALIBRATION = OptionGroup(
    CalibrationChoice,
    {
        "calibration": Calibration,
        "compute_efficiency": ComputeEfficiency,
        "bandwidth_efficiency": BandwidthEfficiency,
        "kv_bandwidth_efficiency": KvBandwidthEfficiency,
        "overhead_ms": OverheadMs,
        "mode": Mode,
    },
)

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
        "calibration": CALIBRATION,
    },
)
