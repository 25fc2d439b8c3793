"""How a profile's probes become its fits, whatever timed them: the knee (two segments) and the
step-time model in the engine's accounting, with the calibration's figures beside them; and
``profile --from FILE.csv``, iteration times measured elsewhere fitted the same way. scipy
loads only when a profile is fitted, not at CLI start-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from budgettune import __version__
from budgettune.core.errors import SpecError
from budgettune.core.hardware import ModelShape, dtype_bytes, resolve_gpu
from budgettune.model.calibration import CalibrationChoice
from budgettune.model.profile import (
    EngineInfo,
    Hardware,
    ModelInfo,
    Probe,
    Profile,
    RidgeFit,
    StepFit,
)
from budgettune.model.stepmodel import StepModel

if TYPE_CHECKING:
    from budgettune.model.fit import ShapeConstants

IMPORT_ENGINE = "import"  # --from FILE: iteration times measured elsewhere


def shape_constants(shape: ModelShape, bytes_per_weight: float, accounting: str) -> ShapeConstants:
    """The shape's constants in ``accounting``, the one the profile is fitted in."""
    from budgettune.model.fit import ShapeConstants

    reference = StepModel.of_shape(
        shape, accounting=accounting, flops_per_s=1.0, bytes_per_s=1.0,
        bytes_per_weight=bytes_per_weight,
    )  # fmt: skip
    return ShapeConstants.of(reference)


def fit_profile(
    probes: tuple[Probe, ...],
    shape: ModelShape,
    bytes_per_weight: float,
    *,
    accounting: str,
    calibration: CalibrationChoice,
    bootstrap: int,
    rng: np.random.Generator,
    preset: str | None,
    request_overhead_series: tuple[str, ...] = (),
    cpu_free: bool = False,
) -> tuple[RidgeFit, StepFit | None]:
    """The knee and the step-time fit of ``probes``; the figures of the GPU preset ``preset``
    in ``calibration`` beside the fit; ``cpu_free``: GPU time only (no t0 to fit). The step fit
    is None for too few probes (a partial run keeps its raw data)."""
    from budgettune.model.fit import fit_step_model
    from budgettune.model.ridge import fit_ridge

    constants = shape_constants(shape, bytes_per_weight, accounting)
    ridge = fit_ridge(
        probes, attention_ratio=constants.attention_ratio, rng=rng, bootstrap=bootstrap
    )
    preset_model = None
    if preset is not None:
        preset_model = StepModel.from_hardware(
            shape,
            resolve_gpu(preset),
            calibration=calibration.resolve(preset),
            bytes_per_weight=bytes_per_weight,
        )
    try:
        step = fit_step_model(
            probes,
            constants,
            request_overhead_series=request_overhead_series,
            preset=preset_model,
            cpu_free=cpu_free,
        )
    except ValueError:
        step = None
    return ridge, step


def check_times_grow(probes: Sequence[Probe], path: Path) -> None:
    """Refuse iteration times that fall as the work grows: more prompt tokens (the prefill
    series) or more decoders (the decode series) never take less time in one engine, so a file
    whose trend falls holds something else (swapped columns, another unit), and any fit of it
    would invent a ridge (SpecError on ``from_csv``)."""
    for series, size in (("prefill", "prompt_tokens"), ("decode", "batch")):
        found = [p for p in probes if p.series == series]
        sizes = np.array([getattr(p, size) for p in found], dtype=np.float64)
        if len(found) < 2 or np.ptp(sizes) == 0:
            continue
        times = np.array([p.median_s for p in found], dtype=np.float64)
        slope = float(np.polyfit(sizes, times, 1)[0])
        if slope < 0:
            unit = "token" if series == "prefill" else "decoder"
            raise SpecError(
                f"{path}: {series} times fall as the {series} grows ({slope * 1e6:+.3g} us a "
                f"{unit} over {sizes.min():.0f}-{sizes.max():.0f}); iteration times of one "
                "engine grow with the work: check the columns and the unit (ms)",
                field="from_csv",
            )


def imported_profile(
    path: Path,
    *,
    model_source: str,
    shape: ModelShape,
    gpu_name: str,
    dtype: str,
    tensor_parallel: int,
    calibration: CalibrationChoice,
    bootstrap: int,
    seed: int,
    created_utc: str,
) -> Profile:
    """``--from FILE.csv``: the file's iteration times as a measured profile's probes, fitted
    as any measured profile is (the engine accounting); the hardware is what ``gpu_name`` names
    ("auto": not given), not this machine. Raises SpecError on field ``from_csv`` naming the
    file and line of a bad row."""
    from budgettune.model.profile import match_gpu_preset
    from budgettune.profiling.imported import read_iteration_csv

    probes = read_iteration_csv(path, field="from_csv")
    check_times_grow(probes, path)
    dtype = "bfloat16" if dtype == "auto" else dtype
    weight_bytes = dtype_bytes(dtype)
    if gpu_name.strip().lower() == "auto":
        hardware = Hardware("unknown", "not given (measured elsewhere)")
    else:
        preset = match_gpu_preset(gpu_name)
        hardware = Hardware("gpu", gpu_name, count=tensor_parallel, preset=preset)
    ridge, step = fit_profile(
        probes,
        shape,
        weight_bytes,
        accounting="engine",
        calibration=calibration,
        bootstrap=bootstrap,
        rng=np.random.default_rng(seed),
        preset=hardware.preset,
    )
    settings: dict[str, object] = {
        "file": str(path),
        "rows": sum(len(p.times_s) for p in probes),
        "dtype": dtype,
        "tensor_parallel": tensor_parallel,
    }
    return Profile(
        kind="measured",
        label=f"measured elsewhere: iteration times imported from {path}",
        created_utc=created_utc,
        budgettune_version=__version__,
        hardware=hardware,
        engine=EngineInfo(IMPORT_ENGINE, None, settings),
        model=ModelInfo(model_source, shape, dtype, weight_bytes, weight_bytes),
        probes=probes,
        ridge=ridge,
        step=step,
    )
