"""Fitting the measured calibrations to the reference data in ``data/aiconfigurator/``, and
checking that the fit generalises beyond what it was fitted to.

The reference (``scripts/aic_reference.py`` writes it from NVIDIA AIConfigurator 0.12.0):

- ``<model>_<gpu>.csv``: iterations on one GPU. The per-GPU figures (compute, weight and
  KV-cache bandwidth shares, the knee's sharpness, the overlap variant) and the one per-layer
  floor shared by every GPU are fitted to these, and only these.
- ``tp/<model>_<gpu>_tp<n>.csv``: the same iterations split over n GPUs. Nothing is fitted to
  them: they test the pooled roofline, the floor and the all-reduces together.
- ``allreduce/<gpu>.csv``: the all-reduce table the communication term is fitted to, per GPU
  count (:mod:`budgettune.model.allreduce`).

Leave-one-out (:func:`leave_shape_out`, :func:`leave_gpu_out`) refits without one model shape,
or without one GPU, and measures the errors on what was left out. ``scripts/fit_calibrations.py``
prints every figure; ``tests/test_calibration_tp.py`` holds them to the targets.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
from scipy import optimize

from budgettune.core.hardware import Link, link_of, resolve_gpu, resolve_model
from budgettune.model.allreduce import MEASURED_GPU_COUNTS, AllReduce
from budgettune.model.calibration import Calibration, calibration_for
from budgettune.model.probe_work import ShapeConstants, Work, model_predict_s, probe_work
from budgettune.model.profile import Probe
from budgettune.model.stepmodel import MODES, StepModel
from budgettune.profiling.imported import read_iteration_csv

FloatArray = npt.NDArray[np.float64]
AllReduceFigures = dict[int, tuple[float, float]]  # gpus: (share of the link, latency in us)

# The calibration fit's objective: the mean 8th power of the relative errors, not their squares,
# so that it bounds the maximum error (25%) as well as the RMS (12%).
POWER = 8
START = (0.6, 0.7, 0.7, 3.0)
LOW = (0.05, 0.05, 0.05, 1.0)
HIGH = (1.0, 1.0, 1.0, 64.0)
FLOOR_BOUNDS_US = (0.0, 150.0)
FLOOR_START_US = (40.0, 20.0)
# The all-reduce messages an iteration sends: one token of a 4,096-wide model up to 8,192 tokens
# of an 8,192-wide one (elements).
ALLREDUCE_ELEMENTS = (4096, 8192 * 8192)


@dataclass(frozen=True)
class ReferenceFile:
    """One reference file: ``model`` on ``gpus`` GPUs like ``gpu``, and its iterations."""

    model: str
    gpu: str
    gpus: int
    probes: tuple[Probe, ...]

    @property
    def name(self) -> str:
        return f"{self.model}_{self.gpu}" + (f"_tp{self.gpus}" if self.gpus > 1 else "")

    # the probes' work per accounting, computed on first use
    _works: dict[str, Work] = field(default_factory=dict, init=False, repr=False, compare=False)

    def work(self, model: StepModel) -> Work:
        """The probes' work (FLOPs, bytes) in ``model``'s accounting, computed once each."""
        works = self._works
        if model.accounting not in works:
            works[model.accounting] = probe_work(self.probes, ShapeConstants.of(model))
        return works[model.accounting]


def read_reference(folder: Path) -> list[ReferenceFile]:
    """Every one-GPU file in ``folder`` and every split one in ``folder/tp``."""
    files = []
    for path in sorted(folder.glob("*_*.csv")):
        model, gpu = path.stem.split("_", 1)
        files.append(ReferenceFile(model, gpu, 1, read_iteration_csv(path)))
    for path in sorted((folder / "tp").glob("*_*_tp*.csv")):
        model, gpu, tp = path.stem.split("_")
        files.append(
            ReferenceFile(model, gpu, int(tp.removeprefix("tp")), read_iteration_csv(path))
        )
    return files


def read_allreduce(folder: Path) -> dict[str, list[tuple[int, int, float]]]:
    """{gpu: [(gpus, elements, seconds)]} from ``folder/allreduce/<gpu>.csv``."""
    out = {}
    for path in sorted((folder / "allreduce").glob("*.csv")):
        with path.open(newline="") as handle:
            out[path.stem] = [
                (int(r["gpus"]), int(r["elements"]), float(r["ms"]) / 1e3)
                for r in csv.DictReader(handle)
            ]
    return out


def rms(errors: FloatArray) -> float:
    return math.sqrt(float(np.mean(errors**2))) if len(errors) else 0.0


def worst(errors: FloatArray) -> float:
    return float(np.max(np.abs(errors))) if len(errors) else 0.0


# ---------------------------------------------------------------------------------------------
# The all-reduce


def allreduce_time_s(
    elements: FloatArray, gpus: int, share: float, latency_us: float, link: Link
) -> FloatArray:
    """The all-reduce of ``elements`` 16-bit values with these figures: the step model's own
    :meth:`AllReduce.time_s`, over an array of messages."""
    allreduce = AllReduce(gpus, link, latency_us * 1e-6, share * link.bytes_per_s, "fit")
    return np.asarray(allreduce.time_s(elements))  # type: ignore[arg-type]


def _allreduce_points(
    rows: Sequence[tuple[int, int, float]], gpus: int
) -> tuple[FloatArray, FloatArray]:
    low, high = ALLREDUCE_ELEMENTS
    points = [(e, s) for n, e, s in rows if n == gpus and low <= e <= high]
    return np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)


def fit_allreduce(gpu: str, rows: Sequence[tuple[int, int, float]]) -> AllReduceFigures:
    """Per GPU count in the table: the share of the link's peak and the latency (us) that fit
    its times best, in relative terms (least squares of the log ratio), over the messages an
    iteration sends."""
    link = link_of(resolve_gpu(gpu))
    figures = {}
    for n in MEASURED_GPU_COUNTS:
        elements, seconds = _allreduce_points(rows, n)

        def residuals(theta: FloatArray, n: int = n, e: FloatArray = elements) -> FloatArray:
            return np.log(allreduce_time_s(e, n, theta[0], theta[1], link) / seconds)  # noqa: B023

        found = optimize.least_squares(residuals, (0.5, 5.0), bounds=((1e-3, 0.1), (2.0, 1e3)))
        figures[n] = (round(float(found.x[0]), 3), round(float(found.x[1]), 1))
    return figures


def allreduce_errors(
    gpu: str, rows: Sequence[tuple[int, int, float]], figures: AllReduceFigures
) -> dict[int, FloatArray]:
    """Relative errors of ``figures`` against the table, per GPU count."""
    link = link_of(resolve_gpu(gpu))
    out = {}
    for n, (share, latency_us) in figures.items():
        elements, seconds = _allreduce_points(rows, n)
        out[n] = allreduce_time_s(elements, n, share, latency_us, link) / seconds - 1.0
    return out


# ---------------------------------------------------------------------------------------------
# The step-time model's figures


Floors = tuple[float, float]  # per layer, seconds: every iteration's, and more with a prompt


def calibration_of(theta: Sequence[float] | FloatArray, mode: str, floors: Floors) -> Calibration:
    compute, weights, kv, sharpness = (float(v) for v in theta)
    return Calibration(
        "fit", "engine", compute, weights, kv, sharpness, mode, 0.0, 0.0, "fit", *floors
    )


def file_errors(file: ReferenceFile, calibration: Calibration) -> FloatArray:
    """Relative errors (model - reference) / reference on ``file``, GPU time only (t0 = 0)."""
    model = StepModel.from_hardware(
        resolve_model(file.model),
        resolve_gpu(file.gpu),
        calibration=replace(calibration, overhead_s=0.0, overhead_per_seq_s=0.0),
        tensor_parallel=file.gpus,
    )
    work = file.work(model)
    return np.asarray(model_predict_s(work, model) / work.time_s - 1.0)


def errors_of(files: Sequence[ReferenceFile], calibration: Calibration) -> FloatArray:
    return np.concatenate([file_errors(f, calibration) for f in files])


def fit_calibration(files: Sequence[ReferenceFile], floors: Floors) -> tuple[Calibration, float]:
    """One calibration for every file given (each on its own GPU), with the per-layer floors
    given, in the overlap variant that fits better; and its objective."""
    best: tuple[Calibration, float] | None = None
    for mode in MODES:

        def residuals(theta: FloatArray, mode: str = mode) -> FloatArray:
            e = errors_of(files, calibration_of(theta, mode, floors))
            return np.asarray(np.sign(e) * np.abs(e) ** (POWER / 2))

        found = optimize.least_squares(
            residuals, START, bounds=(LOW, HIGH), x_scale=(0.1, 0.1, 0.1, 1.0)
        )
        cal = calibration_of(found.x, mode, floors)
        objective = float(np.mean(np.abs(errors_of(files, cal)) ** POWER))
        if best is None or objective < best[1]:
            best = (cal, objective)
    assert best is not None
    return best


def by_gpu(files: Sequence[ReferenceFile]) -> dict[str, list[ReferenceFile]]:
    out: dict[str, list[ReferenceFile]] = defaultdict(list)
    for f in files:
        out[f.gpu].append(f)
    return dict(out)


def fit_per_gpu(files: Sequence[ReferenceFile], floors: Floors) -> dict[str, Calibration]:
    """Each GPU's calibration, fitted to its one-GPU files."""
    return {
        gpu: fit_calibration(group, floors)[0]
        for gpu, group in by_gpu([f for f in files if f.gpus == 1]).items()
    }


def fit_floors(files: Sequence[ReferenceFile]) -> Floors:
    """The two per-layer floors (seconds), one pair for every GPU, that minimise the sum of the
    GPUs' objectives on the one-GPU files, each GPU's figures refitted at every trial; to the
    microsecond."""
    groups = by_gpu([f for f in files if f.gpus == 1])

    def floors_of(us: FloatArray) -> Floors:
        low, high = FLOOR_BOUNDS_US
        every, prefill = np.clip(us, low, high)
        return float(every) * 1e-6, float(prefill) * 1e-6

    def total(us: FloatArray) -> float:
        return sum(fit_calibration(g, floors_of(us))[1] for g in groups.values())

    found = optimize.minimize(
        total, FLOOR_START_US, method="Nelder-Mead", options={"xatol": 0.5, "fatol": 1e-12}
    )
    every, prefill = floors_of(found.x)
    return round(every * 1e6) * 1e-6, round(prefill * 1e6) * 1e-6


# ---------------------------------------------------------------------------------------------
# Generalisation


@dataclass(frozen=True)
class LeftOut:
    """The errors on one file that a fit did not see, and what was left out to get them."""

    file: ReferenceFile
    left_out: str  # "shape" or "gpu" (or "none": nothing of it was fitted, the split files)
    errors: FloatArray


def leave_shape_out(files: Sequence[ReferenceFile], floors: Floors) -> list[LeftOut]:
    """For every GPU with two shapes or more: its figures fitted without one shape's one-GPU
    file, tested on that file and on the shape's split files."""
    out = []
    one_gpu = by_gpu([f for f in files if f.gpus == 1])
    for gpu, group in one_gpu.items():
        shapes = {f.model for f in group}
        if len(shapes) < 2:
            continue
        for shape in sorted(shapes):
            cal, _ = fit_calibration([f for f in group if f.model != shape], floors)
            for f in files:
                if f.gpu == gpu and f.model == shape:
                    out.append(LeftOut(f, "shape", file_errors(f, cal)))
    return out


def leave_gpu_out(files: Sequence[ReferenceFile], floors: Floors) -> list[LeftOut]:
    """For every GPU: one calibration fitted to every other GPU's one-GPU files (the shares of
    peak they have in common), tested on that GPU's files, split ones too (its all-reduce
    figures are its link's own, fitted to another table)."""
    out = []
    one_gpu = [f for f in files if f.gpus == 1]
    for gpu in sorted({f.gpu for f in one_gpu}):
        cal, _ = fit_calibration([f for f in one_gpu if f.gpu != gpu], floors)
        out += [LeftOut(f, "gpu", file_errors(f, cal)) for f in files if f.gpu == gpu]
    return out


def split_errors(
    files: Sequence[ReferenceFile], calibration: Callable[[str], Calibration]
) -> list[LeftOut]:
    """The split files against the calibration each GPU ships (nothing was fitted to them)."""
    return [LeftOut(f, "none", file_errors(f, calibration(f.gpu))) for f in files if f.gpus > 1]


def shipped(name: str = "measured") -> Callable[[str], Calibration]:
    """The shipped calibration ``name`` of a GPU preset."""
    return lambda gpu: calibration_for(name, gpu)


def pooled(results: Sequence[LeftOut], sizes: Sequence[int]) -> FloatArray:
    """Every error of the files on one of ``sizes`` GPUs, pooled."""
    chosen = [r.errors for r in results if r.file.gpus in sizes]
    return np.concatenate(chosen) if chosen else np.array([])
