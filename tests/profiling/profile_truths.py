"""Known step-time models the profile tests fit against (imported by conftest.py and tests)."""

from __future__ import annotations

from dataclasses import replace

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.calibration import calibration_for
from budgettune.model.stepmodel import StepModel


def llama_on_h100(calibration: str = "measured", mode: str = "overlapped") -> StepModel:
    """Llama-3.1-8B on an H100 SXM from presets in ``calibration``, with t0 = 2 ms, as a profile
    fit models it: the measured calibration's per-layer floors and norm traffic left out (a fit
    on the engine holds them in its t0 and its bandwidths; it has no terms of their own)."""
    gpu = resolve_gpu("h100-sxm")
    cal = calibration_for(calibration, gpu.name).with_overrides(overhead_s=2e-3, mode=mode)
    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), gpu, calibration=cal)
    return replace(model, unsplit_fixed_s=0.0, unsplit_prefill_s=0.0, unsplit_per_token_s=0.0)
