"""The GPU a real engine will run on when --gpu is not given: `nvidia-smi` (through
:func:`~budgettune.model.profile.detect_hardware`), matched to a preset by name, with its memory
read too, so an unknown card still gets the engine's default-budget rule
(``budgettune.core.engine_defaults``)."""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.hardware import GPU, resolve_gpu
from budgettune.model.profile import detect_hardware, query_gpus

_MIB = 1024**2
_GIB = 1024**3


@dataclass(frozen=True, slots=True)
class DetectedGPU:
    """What nvidia-smi lists (name None: no GPU visible) and the preset its name matches."""

    name: str | None
    count: int
    memory_bytes: float | None  # nvidia-smi's memory.total, else the preset's
    preset: GPU | None

    def describe(self) -> str:
        """e.g. "NVIDIA H100 80GB HBM3 x8 (nvidia-smi, 79.6 GiB; preset h100-sxm)"."""
        if self.name is None:
            return "none visible (no nvidia-smi, or it lists no GPU)"
        count = f" x{self.count}" if self.count > 1 else ""
        memory = "" if self.memory_bytes is None else f", {self.memory_bytes / _GIB:.1f} GiB"
        match = (
            f"preset {self.preset.name}"
            if self.preset is not None
            else "no preset matches; --gpu names one for the predictions"
        )
        return f"{self.name}{count} (nvidia-smi{memory}; {match})"


def detect_gpu() -> DetectedGPU:
    """This machine's first GPU as nvidia-smi names it, or a DetectedGPU with no name."""
    hardware = detect_hardware("auto")
    if hardware.kind != "gpu":
        return DetectedGPU(None, 0, None, None)
    preset = resolve_gpu(hardware.preset) if hardware.preset else None
    memory = _memory_total_bytes()
    if memory is None and preset is not None:
        memory = preset.memory_bytes
    return DetectedGPU(hardware.name, hardware.count, memory, preset)


def _memory_total_bytes() -> float | None:
    """The first GPU's memory as nvidia-smi reports it (MiB), in bytes; None if it cannot say."""
    rows = query_gpus("memory.total")
    try:
        return float(rows[0][0]) * _MIB if rows else None
    except ValueError:
        return None
