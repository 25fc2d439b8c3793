"""A profile file as a simulator's model (:func:`profiled_model`): the calibrated step model, the
model's shape and the GPU that sizes the KV cache. Used by the embedded engine and ``simulate``
when given ``--profile``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from budgettune.core.hardware import GPU, ModelShape, resolve_gpu
from budgettune.model.stepmodel import StepModel


@dataclass(slots=True, frozen=True)
class ProfiledModel:
    """What a profile file gives a simulator: the calibrated step model, the shape, and the GPU
    whose memory sizes the KV cache."""

    step_model: StepModel
    shape: ModelShape
    gpu: GPU
    tensor_parallel: int
    dtype: str
    description: str  # for banners: "profile FILE (measured, vllm on CPU NAME)"
    knee_found: bool  # False: the measurements showed no ridge; F/B is only the fit's ratio


def profiled_model(path: Path | str, gpu: str) -> ProfiledModel:
    """Load a profile for ``--profile``. Its fitted F, B, t0 and mode replace the presets.

    KV-cache capacity needs GPU memory, which a profile does not record: the GPU preset the
    profile's hardware matches (an analytic profile, or an H100 recognised by name) is used,
    else the ``gpu`` preset (``--gpu``; a CPU profile sizes its cache as on that GPU).
    Raises SpecError (exit 2) for an unreadable file or a profile without a step fit.
    """
    from budgettune.model.profile import load_profile, match_gpu_preset, profile_step_model

    profile = load_profile(path)
    step_model = profile_step_model(profile)
    preset = profile.hardware.preset or (
        match_gpu_preset(profile.hardware.name) if profile.hardware.kind != "cpu" else None
    )
    card = resolve_gpu(preset or gpu)
    settings = profile.engine.settings
    recorded = settings.get("tensor_parallel") or settings.get("tensor_parallel_size")
    tensor_parallel = int(recorded) if isinstance(recorded, int | float) else 1
    where = f"{profile.hardware.kind} {profile.hardware.name}"
    return ProfiledModel(
        step_model=step_model,
        shape=profile.model.shape,
        gpu=card,
        tensor_parallel=tensor_parallel,
        dtype=profile.model.dtype,
        description=f"profile {path} ({profile.kind}, {profile.engine.name} on {where})",
        knee_found=profile.ridge is None or profile.ridge.knee_found,
    )
