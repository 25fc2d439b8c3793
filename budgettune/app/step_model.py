"""The analytic step-time model a :class:`~budgettune.app.requests.ModelRequest` describes: the
GPU (a preset, or a custom one from its three figures) and the roofline :class:`StepModel`, the
same for ``roofline``, ``simulate`` and ``sweep``'s analytic predictions."""

from __future__ import annotations

from budgettune.app.requests import ModelRequest
from budgettune.core.errors import SpecError
from budgettune.core.hardware import GPU, custom_gpu, dtype_bytes, resolve_gpu, resolve_model
from budgettune.model.stepmodel import MODES, StepModel

_CUSTOM = {  # a custom GPU's three figures, by field, as the messages name them
    "peak_tflops": "the peak TFLOP/s",
    "bandwidth_tbs": "the memory bandwidth (TB/s)",
    "memory_gb": "the memory size (GB)",
}


def gpu_of(request: ModelRequest) -> GPU:
    """The custom GPU when all three figures are given, else the preset; half a custom GPU is
    an error naming the figures missing."""
    figures = {name: getattr(request, name) for name in _CUSTOM}
    given = [name for name, value in figures.items() if value is not None]
    if not given:
        return resolve_gpu(request.gpu)
    if len(given) < 3:
        missing = [name for name in _CUSTOM if name not in given]
        raise SpecError(
            f"a custom GPU needs {' and '.join(_CUSTOM[name] for name in missing)} as well as "
            f"{' and '.join(_CUSTOM[name] for name in given)}",
            field=missing[0],
        )
    assert request.peak_tflops and request.bandwidth_tbs and request.memory_gb
    return custom_gpu(request.peak_tflops, request.bandwidth_tbs, request.memory_gb)


def step_model_of(request: ModelRequest, gpu: GPU | None = None) -> StepModel:
    """The roofline StepModel of ``request`` on ``gpu`` (default: :func:`gpu_of`). Raises
    SpecError naming the field of a value out of range."""
    for field in ("compute_efficiency", "bandwidth_efficiency"):
        value = getattr(request, field)
        if not 0 < value <= 1:
            raise SpecError(f"must be in (0, 1], got {value!r}", field=field)
    if not request.overhead_ms >= 0:
        raise SpecError(
            f"must be zero or positive, got {request.overhead_ms!r}", field="overhead_ms"
        )
    if request.mode not in MODES:
        raise SpecError(
            f"unknown variant {request.mode!r}; use one of: {', '.join(MODES)}", field="mode"
        )
    return StepModel.from_hardware(
        resolve_model(request.model),
        gpu or gpu_of(request),
        bytes_per_weight=dtype_bytes(request.dtype),
        compute_efficiency=request.compute_efficiency,
        bandwidth_efficiency=request.bandwidth_efficiency,
        overhead_s=request.overhead_ms / 1e3,
        mode=request.mode,
        tensor_parallel=request.tensor_parallel,
    )
