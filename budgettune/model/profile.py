"""The versioned profile file: hardware, engine, model shape, every raw probe and the fits.

A profile is plain data; :func:`save_profile` / :func:`load_profile` round-trip it through JSON
(plus a CSV of the raw curve beside it), and :func:`profile_step_model` turns it into the
:class:`~budgettune.model.stepmodel.StepModel` that ``simulate --profile FILE`` runs on.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from budgettune.core import jsonio
from budgettune.core.errors import SpecError, UserError
from budgettune.core.fields import check_schema
from budgettune.core.files import (
    atomic_writer,
    check_overwrite,
    json_document_ours,
    make_folder,
    write_atomic,
)
from budgettune.core.hardware import GPU_PRESETS, ModelShape
from budgettune.model.profile_check import check_numbers
from budgettune.model.stepmodel import ACCOUNTINGS, MODES, StepModel

# 2: the step fit records its accounting, KV-cache bandwidth and sharpness (issue 15); a file
# of version 1 reads as the seed accounting it was fitted in.
SCHEMA_VERSION = 2
SERIES = ("prefill", "decode", "mixed")
ANALYTIC_LABEL = "model output from presets (roofline step-time model), not a measurement"
MEASURED_LABEL = "measured"


@dataclass(slots=True, frozen=True)
class Hardware:
    """Where the profile was taken. kind: "gpu", "cpu" or "preset" (analytic, nothing measured)."""

    kind: str
    name: str
    count: int = 1
    driver: str | None = None
    preset: str | None = None  # the GPU preset this hardware matches, for preset-vs-fit tables


@dataclass(slots=True, frozen=True)
class EngineInfo:
    """The engine that ran the probes and the settings it ran with. ``settings`` is the engine's
    own record, kept as a JSON object on purpose: its keys differ by engine (torch: device,
    threads; vLLM/SGLang: command, budget_tokens; analytic: efficiencies) and are shown and
    saved as given, so profile.json round-trips it verbatim."""

    name: str
    version: str | None = None
    settings: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class ModelInfo:
    """The model's shape and the element sizes the step-time model needs."""

    source: str  # preset name or the config.json path given
    shape: ModelShape
    dtype: str
    bytes_per_weight: float
    kv_bytes_per_element: float


@dataclass(slots=True, frozen=True)
class Probe:
    """One probed iteration shape and its repeated timings (seconds).

    series: "prefill" (one prompt of prompt_tokens, no decodes), "decode" (batch decodes, each at
    context_tokens, no prompt) or "mixed" (both in one iteration). tag "tile" marks probes just
    above a round size, kept to expose tile quantisation and left out of the fits.
    """

    series: str
    prompt_tokens: int
    batch: int
    context_tokens: int
    times_s: tuple[float, ...]
    tag: str = ""

    @property
    def median_s(self) -> float:
        return float(np.median(self.times_s)) if self.times_s else math.nan

    @property
    def spread_s(self) -> tuple[float, float]:
        """(min, max) of the repeats."""
        if not self.times_s:
            return (math.nan, math.nan)
        return (float(min(self.times_s)), float(max(self.times_s)))


@dataclass(slots=True, frozen=True)
class RidgeFit:
    """The two-segment fit of prefill time against tokens, or the honest statement that none fits.

    knee_tokens is None when no knee lies inside the measured range; ``reason`` says why in plain
    words. The linear fit ``t = intercept + slope (P + q P^2)`` (q = attention_ratio, so that a
    prompt's attention FLOPs count) is always given.
    """

    knee_found: bool
    reason: str
    knee_tokens: float | None
    ci_low_tokens: float | None
    ci_high_tokens: float | None
    linear_intercept_s: float
    linear_slope_s_per_token: float
    linear_median_rel_error: float
    hinge_slope_below_s_per_token: float | None = None
    hinge_slope_above_s_per_token: float | None = None
    hinge_median_rel_error: float | None = None
    p_value: float | None = None
    tokens_min: int = 0
    tokens_max: int = 0
    bootstrap_samples: int = 0
    tile_ratios: dict[str, float] = field(default_factory=dict)  # "257/256": t(257) / t(256)
    attention_ratio: float = 0.0  # q: the fits use effective tokens x = P + q P^2


@dataclass(slots=True, frozen=True)
class SeriesError:
    """Relative error |predicted - measured| / measured over one series' probe medians."""

    count: int
    median_rel_error: float
    max_rel_error: float


@dataclass(slots=True, frozen=True)
class StepFit:
    """Fitted step-time parameters (achievable F, B, t0, overlap mode) and how well they fit.

    request_overhead_s (+ request_overhead_s_per_token x prompt tokens): the extra time of the
    series in request_overhead_series, measured as TTFT through an HTTP API (None when the
    iterations were timed directly).
    """

    flops_per_s: float
    bytes_per_s: float
    overhead_s: float
    mode: str
    mode_reason: str
    request_overhead_s: float | None
    errors: dict[str, SeriesError]
    holdout: dict[str, SeriesError]
    notes: tuple[str, ...] = ()
    preset: dict[str, float] | None = None  # the presets' F, B, t0 for the same hardware
    cost_by_mode: dict[str, float] = field(default_factory=dict)  # weighted misfit, lower fits
    request_overhead_s_per_token: float | None = None
    request_overhead_series: tuple[str, ...] = ()
    overhead_per_seq_s: float = 0.0  # per sequence in the batch; fitted where the data ask
    holdout_all: SeriesError | None = None  # every held-out probe pooled, whatever its series
    kv_bytes_per_s: float | None = None  # the KV cache's own bandwidth (None: bytes_per_s)
    sharpness: float | None = None  # p of the soft roofline (None: a hard max)
    accounting: str = "seed"  # how parameters count (budgettune.model.stepmodel)
    # Added after the roofline (budgettune.model.stepmodel): tensor parallelism's all-reduces
    # and the work no split shortens. A model output carries them; a fit on the engine holds
    # them in its own figures (0 here).
    comm_fixed_s: float = 0.0
    comm_per_token_s: float = 0.0
    unsplit_fixed_s: float = 0.0
    unsplit_prefill_s: float = 0.0
    unsplit_per_token_s: float = 0.0

    def request_overhead_of(self, probe: Probe) -> float:
        """The fitted request overhead included in ``probe``'s times, seconds (0 if none)."""
        if probe.series not in self.request_overhead_series or self.request_overhead_s is None:
            return 0.0
        per_token = self.request_overhead_s_per_token or 0.0
        return self.request_overhead_s + per_token * probe.prompt_tokens

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SpecError(
                f"step fit mode must be one of {MODES}, got {self.mode!r}", field="profile"
            )
        if self.accounting not in ACCOUNTINGS:
            raise SpecError(
                f"step fit accounting must be one of {ACCOUNTINGS}, got {self.accounting!r}",
                field="profile",
            )
        if self.sharpness is not None and not math.isfinite(self.sharpness):
            object.__setattr__(self, "sharpness", None)  # a hard max, as JSON can hold it


@dataclass(slots=True, frozen=True)
class Profile:
    """A whole profile. kind "measured", "estimate" (a database's, `--engine aiconfigurator`) or
    "analytic" (model output), each labelled as such."""

    kind: str
    label: str
    created_utc: str
    budgettune_version: str
    hardware: Hardware
    engine: EngineInfo
    model: ModelInfo
    probes: tuple[Probe, ...]
    ridge: RidgeFit | None
    step: StepFit | None
    complete: bool = True
    error: str | None = None
    elapsed_s: float = 0.0
    schema_version: int = SCHEMA_VERSION
    # --time-budget: the probing budget it ran under (None: the whole grid) and the probes it
    # left out for it, in words with their estimated cost
    time_budget_s: float | None = None
    skipped: tuple[str, ...] = ()

    def series(self, name: str, *, include_tiles: bool = False) -> list[Probe]:
        """The probes of one series, tile probes left out unless asked for."""
        return [p for p in self.probes if p.series == name and (include_tiles or p.tag != "tile")]


def profile_step_model(profile: Profile) -> StepModel:
    """The StepModel a profile calibrates: shape from the model, F, B, t0, mode from the fit.

    Raises SpecError on field ``profile`` when the profile holds no step fit (a partial one).
    """
    if profile.step is None:
        raise SpecError(
            "this profile has no step-time fit (it is partial: "
            f"{profile.error or 'measurement incomplete'}); measure again",
            field="profile",
        )
    step = profile.step
    fitted = StepModel.of_shape(
        profile.model.shape,
        accounting=step.accounting,
        flops_per_s=step.flops_per_s,
        bytes_per_s=step.bytes_per_s,
        kv_bytes_per_s=step.kv_bytes_per_s,
        sharpness=math.inf if step.sharpness is None else step.sharpness,
        overhead_s=step.overhead_s,
        overhead_per_seq_s=step.overhead_per_seq_s,
        mode=step.mode,
        bytes_per_weight=profile.model.bytes_per_weight,
        kv_bytes_per_element=profile.model.kv_bytes_per_element,
    )
    return dataclasses.replace(
        fitted,
        comm_fixed_s=step.comm_fixed_s,
        comm_per_token_s=step.comm_per_token_s,
        unsplit_fixed_s=step.unsplit_fixed_s,
        unsplit_prefill_s=step.unsplit_prefill_s,
        unsplit_per_token_s=step.unsplit_per_token_s,
    )


# ---------------------------------------------------------------------------------------------
# JSON round trip


def profile_to_json(profile: Profile) -> dict[str, Any]:
    """A JSON-ready dict; tuples become lists, NaN becomes null."""
    return _clean(asdict(profile))


def profile_from_json(
    data: dict[str, Any], *, source: str = "profile", field: str = "profile"
) -> Profile:
    """Rebuild a Profile; raises SpecError on ``field`` (the option that named the file) naming
    the file and the missing or bad key."""
    try:
        version = check_schema(data, source, SCHEMA_VERSION)
        missing = [
            key for key in ("kind", "model", "probes", "hardware", "engine") if key not in data
        ]
        if missing:
            raise UserError(f"{source}: not a budgettune profile (no {missing[0]!r})")
        check_numbers(data, source)
    except UserError as error:
        raise SpecError(error.message, field=field, hint=error.hint) from None
    try:
        model = data["model"]
        shape = ModelShape(**model["shape"])
        ridge = data.get("ridge")
        step = data.get("step")
        return Profile(
            kind=str(data["kind"]),
            label=str(data["label"]),
            created_utc=str(data["created_utc"]),
            budgettune_version=str(data["budgettune_version"]),
            hardware=Hardware(**data["hardware"]),
            engine=EngineInfo(**data["engine"]),
            model=ModelInfo(
                source=str(model["source"]),
                shape=shape,
                dtype=str(model["dtype"]),
                bytes_per_weight=float(model["bytes_per_weight"]),
                kv_bytes_per_element=float(model["kv_bytes_per_element"]),
            ),
            probes=tuple(
                Probe(
                    series=str(p["series"]),
                    prompt_tokens=int(p["prompt_tokens"]),
                    batch=int(p["batch"]),
                    context_tokens=int(p["context_tokens"]),
                    times_s=tuple(float(t) for t in p["times_s"]),
                    tag=str(p.get("tag", "")),
                )
                for p in data["probes"]
            ),
            ridge=None if ridge is None else RidgeFit(**_nan_back(ridge)),
            step=None if step is None else _step_from_json(step),
            complete=bool(data.get("complete", True)),
            error=data.get("error"),
            elapsed_s=float(data.get("elapsed_s", 0.0)),
            schema_version=version,
            time_budget_s=None
            if data.get("time_budget_s") is None
            else float(data["time_budget_s"]),
            skipped=tuple(str(item) for item in data.get("skipped") or ()),
        )
    except SpecError as error:  # raised by a type's own check: shown as the option given
        raise SpecError(error.message, field=field, hint=error.hint) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecError(
            f"{source}: not a budgettune profile ({_short(repr(exc))})", field=field
        ) from None


def _short(text: str) -> str:
    return text if len(text) <= 120 else text[:117] + "..."


def _step_from_json(step: dict[str, Any]) -> StepFit:
    step = _nan_back(step)
    return StepFit(
        **{
            **step,
            "errors": {k: SeriesError(**v) for k, v in step["errors"].items()},
            "holdout": {k: SeriesError(**v) for k, v in step["holdout"].items()},
            "holdout_all": SeriesError(**step["holdout_all"]) if step.get("holdout_all") else None,
            "notes": tuple(step.get("notes", ())),
            "request_overhead_series": tuple(step.get("request_overhead_series", ())),
        }
    )


CSV_HEADER = "series,tag,prompt_tokens"  # how profile.csv begins


def save_profile(profile: Profile, path: Path) -> Path:
    """Write the profile JSON at ``path`` and the raw curve CSV beside it, each atomically and
    over a file budgettune wrote only (UserError on field ``output`` otherwise); returns the
    CSV path. StorageError when the disk cannot hold them."""
    csv_path = path.with_suffix(".csv")
    check_overwrite(path, json_document_ours, field="output")
    check_overwrite(csv_path, lambda head: head.startswith(CSV_HEADER.encode()), field="output")
    text = json.dumps(profile_to_json(profile), indent=1, allow_nan=False)
    make_folder(path.parent, field="output")
    write_atomic(path, text + "\n", field="output")
    write_curve_csv(profile, csv_path)
    return csv_path


def load_profile(path: Path | str, *, field: str = "profile") -> Profile:
    """Read a profile JSON file. Raises SpecError (exit 2) on ``field`` (the option that named
    the file, e.g. ``compare`` for ``--with``) naming the file."""
    path = Path(path)
    try:
        data = jsonio.read_json(path, "profile", max_bytes=jsonio.RESULTS_BYTES)
    except UserError as error:
        raise SpecError(error.message, field=field, hint=error.hint) from None
    if not isinstance(data, dict):
        raise SpecError(
            f"{path}: not a budgettune profile (top level is not an object)", field=field
        )
    return profile_from_json(data, source=str(path), field=field)


def write_curve_csv(profile: Profile, path: Path) -> None:
    """One row per probe: shape, median, min, max, repeats, the fitted model's prediction and
    where the times came from ("measured", "database estimate", or "model output" for an
    analytic profile)."""
    model = profile_step_model(profile) if profile.step is not None else None
    source = {"analytic": "model output", "estimate": "database estimate"}.get(
        profile.kind, "measured"
    )
    with atomic_writer(path, newline="", field="output") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "series",
                "tag",
                "prompt_tokens",
                "batch",
                "context_tokens",
                "median_ms",
                "min_ms",
                "max_ms",
                "repeats",
                "model_ms",
                "source",
            ]
        )
        for probe in profile.probes:
            low, high = probe.spread_s
            predicted = ""
            if model is not None:
                chunks = [(probe.prompt_tokens, 0)] if probe.prompt_tokens else []
                seconds = model.iteration_time_s(chunks, [probe.context_tokens] * probe.batch)
                assert profile.step is not None
                seconds += profile.step.request_overhead_of(probe)
                predicted = f"{seconds * 1e3:.6g}"
            writer.writerow(
                [
                    probe.series,
                    probe.tag,
                    probe.prompt_tokens,
                    probe.batch,
                    probe.context_tokens,
                    f"{probe.median_s * 1e3:.6g}",
                    f"{low * 1e3:.6g}",
                    f"{high * 1e3:.6g}",
                    len(probe.times_s),
                    predicted,
                    source,
                ]
            )


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if not math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


_FLOAT_FIELDS_NULLABLE = ("median_rel_error", "max_rel_error", "linear_median_rel_error")


def _nan_back(data: dict[str, Any]) -> dict[str, Any]:
    """JSON null back to NaN for the float fields that are never None by type."""
    out = dict(data)
    for key in _FLOAT_FIELDS_NULLABLE:
        if key in out and out[key] is None:
            out[key] = math.nan
    for key in ("errors", "holdout"):
        if isinstance(out.get(key), dict):
            out[key] = {k: _nan_back(v) for k, v in out[key].items()}
    return out


# ---------------------------------------------------------------------------------------------
# Hardware description

# nvidia-smi product names -> presets; first match wins, so the specific names come first.
_GPU_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"H100.*PCIe", "h100-pcie"),
    (r"H100", "h100-sxm"),
    (r"H200", "h200"),
    (r"A100.*80", "a100-80g"),
    (r"A100", "a100-40g"),
    (r"L40S", "l40s"),
    (r"A6000", "a6000"),
    (r"B200", "b200"),
)


def match_gpu_preset(name: str) -> str | None:
    """The GPU preset an ``nvidia-smi`` product name ("NVIDIA H100 80GB HBM3") matches, if any."""
    lowered = name.strip().lower()
    if lowered in GPU_PRESETS:
        return lowered
    for pattern, preset in _GPU_NAME_PATTERNS:
        if re.search(pattern, name, flags=re.IGNORECASE):
            return preset
    return None


def detect_hardware(gpu_name: str = "auto") -> Hardware:
    """Describe this machine: GPUs from ``nvidia-smi`` where present, else the CPU model.

    ``gpu_name`` other than "auto" overrides the detected name (e.g. a preset name); the
    driver and GPU count still come from ``nvidia-smi`` where present.
    """
    gpus = _nvidia_smi()
    if gpu_name.strip().lower() != "auto":
        driver = gpus[0][1] if gpus else None
        return Hardware(
            "gpu",
            gpu_name,
            count=max(len(gpus), 1),
            driver=driver,
            preset=match_gpu_preset(gpu_name),
        )
    if gpus:
        name, driver = gpus[0]
        return Hardware("gpu", name, count=len(gpus), driver=driver, preset=match_gpu_preset(name))
    return Hardware("cpu", cpu_model(), count=1)


def query_gpus(*fields: str) -> list[list[str]]:
    """``nvidia-smi --query-gpu=FIELDS`` as one row of stripped values per GPU, with units
    left out; [] when there is no nvidia-smi or it fails (no driver, no GPU)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = [[part.strip() for part in line.split(",")] for line in out.splitlines()]
    return [row for row in rows if len(row) == len(fields) and row[0]]


def _nvidia_smi() -> list[tuple[str, str]]:
    return [(name, driver) for name, driver in query_gpus("name", "driver_version")]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"
