"""Known step-time models the profile tests fit against (imported by conftest.py and tests)."""

from __future__ import annotations

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.calibration import calibration_for
from budgettune.model.stepmodel import StepModel


def llama_on_h100(calibration: str = "measured", mode: str = "overlapped") -> StepModel:
    """Llama-3.1-8B on an H100 SXM from presets in ``calibration``, with t0 = 2 ms."""
    gpu = resolve_gpu("h100-sxm")
    cal = calibration_for(calibration, gpu.name).with_overrides(overhead_s=2e-3, mode=mode)
    return StepModel.from_hardware(resolve_model("llama-3.1-8b"), gpu, calibration=cal)
