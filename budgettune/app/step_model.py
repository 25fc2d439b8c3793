"""The analytic step-time model a :class:`~budgettune.app.requests.ModelRequest` describes: the
GPU (a preset, or a custom one from its three figures), the calibration and the roofline
:class:`StepModel`, the same for ``roofline``, ``simulate`` and ``sweep``'s analytic
predictions."""

from __future__ import annotations

from budgettune.app.requests import ModelRequest
from budgettune.core.errors import SpecError
from budgettune.core.hardware import GPU, custom_gpu, dtype_bytes, resolve_gpu, resolve_model
from budgettune.model.calibration import Calibration
from budgettune.model.stepmodel import StepModel

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
    assert None not in (request.peak_tflops, request.bandwidth_tbs, request.memory_gb)
    return custom_gpu(request.peak_tflops, request.bandwidth_tbs, request.memory_gb)  # type: ignore[arg-type]


def calibration_of(request: ModelRequest, gpu: GPU | None = None) -> Calibration:
    """The calibration ``request`` asks for on ``gpu`` (default: :func:`gpu_of`), with the
    figures it gives instead. Raises SpecError naming the field of a value out of range."""
    return request.calibration.resolve((gpu or gpu_of(request)).name)


def step_model_of(request: ModelRequest, gpu: GPU | None = None) -> StepModel:
    """The roofline StepModel of ``request`` on ``gpu`` (default: :func:`gpu_of`) in the
    calibration it names. Raises SpecError naming the field of a value out of range (the
    calibration's overrides check the efficiencies, t0 and the mode; StepModel.from_hardware the
    GPU count)."""
    card = gpu or gpu_of(request)
    return StepModel.from_hardware(
        resolve_model(request.model),
        card,
        calibration=calibration_of(request, card),
        bytes_per_weight=dtype_bytes(request.dtype),
        tensor_parallel=request.tensor_parallel,
    )
