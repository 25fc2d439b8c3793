"""Calibrations of the step-time model: the efficiencies, knee sharpness, overlap variant and
CPU time that turn a GPU's datasheet figures into iteration times. Two, by name:

- ``measured`` (the default): per GPU, fitted to silicon-measured iteration times, in the
  engine accounting (:mod:`budgettune.model.stepmodel`). The table below is the only place the
  fitted figures live; ``scripts/fit_calibrations.py`` re-derives it from the reference points
  in ``data/aiconfigurator/`` (NVIDIA AIConfigurator 0.12.0's vLLM database, Apache-2.0).
- ``seed``: the textbook roofline's accounting and figures (F = 0.6 of peak, B = 0.8, t0 = 0.5
  ms, overlapped, a hard max), kept so its worked figures reproduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from budgettune.core.errors import SpecError
from budgettune.core.limits import check_share

CALIBRATIONS = ("measured", "seed")
DEFAULT_CALIBRATION = "measured"


MAX_OVERHEAD_S = 60.0  # t0 (or its per-sequence part): a minute per iteration is beyond any engine


@dataclass(frozen=True, slots=True)
class Calibration:
    """How one GPU's peaks become achievable figures, and the CPU time beside them.

    compute_efficiency: share of peak dense FLOP/s the matrix multiplies reach;
    weight_bandwidth_efficiency / kv_bandwidth_efficiency: share of peak memory bandwidth when
    streaming weights / reading the KV cache (decode attention); sharpness: p of the soft
    roofline (inf: a hard max); overhead_s + overhead_per_seq_s x sequences: CPU time per
    iteration; layer_floor_s: GPU time per layer that no tensor split shortens, and
    prefill_layer_floor_s: more of it in an iteration holding a prompt chunk (0: none, the
    seed). ``source`` says where the figures come from, in words a user reads.
    """

    name: str
    accounting: str
    compute_efficiency: float
    weight_bandwidth_efficiency: float
    kv_bandwidth_efficiency: float
    sharpness: float
    mode: str
    overhead_s: float
    overhead_per_seq_s: float
    source: str
    layer_floor_s: float = 0.0
    prefill_layer_floor_s: float = 0.0

    def with_overrides(
        self,
        *,
        compute_efficiency: float | None = None,
        bandwidth_efficiency: float | None = None,
        kv_bandwidth_efficiency: float | None = None,
        overhead_s: float | None = None,
        overhead_per_seq_s: float | None = None,
        mode: str | None = None,
    ) -> Calibration:
        """This calibration with the figures a user gave instead (None keeps its own). In the
        seed accounting one bandwidth serves weights and KV cache, so ``bandwidth_efficiency``
        sets both unless ``kv_bandwidth_efficiency`` is given. Raises SpecError naming the
        field of a value out of range."""
        for name, value in (
            ("compute_efficiency", compute_efficiency),
            ("bandwidth_efficiency", bandwidth_efficiency),
            ("kv_bandwidth_efficiency", kv_bandwidth_efficiency),
        ):
            if value is not None:
                check_share(value, field=name)  # NaN and inf fail too
        for name, value in (
            ("overhead_ms", overhead_s),
            ("overhead_per_seq_ms", overhead_per_seq_s),
        ):
            if value is None:
                continue
            if not value >= 0:  # nan too
                raise SpecError(f"must be zero or positive, got {value * 1e3:g}", field=name)
            if value > MAX_OVERHEAD_S:  # a minute per iteration is beyond any engine
                raise SpecError(
                    f"must be at most {MAX_OVERHEAD_S * 1e3:g} ms, got {value * 1e3:g}", field=name
                )
        if mode is not None and mode not in ("overlapped", "serialized"):
            raise SpecError(
                f"unknown variant {mode!r}; use one of: overlapped, serialized", field="mode"
            )
        kv = kv_bandwidth_efficiency
        if kv is None and bandwidth_efficiency is not None and self.accounting == "seed":
            kv = bandwidth_efficiency
        given = {
            "compute_efficiency": compute_efficiency,
            "weight_bandwidth_efficiency": bandwidth_efficiency,
            "kv_bandwidth_efficiency": kv,
            "overhead_s": overhead_s,
            "overhead_per_seq_s": overhead_per_seq_s,
            "mode": mode,
        }
        changes: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if not changes:
            return self
        return replace(self, source=f"{self.source}; {', '.join(changes)} as given", **changes)


SEED = Calibration(
    name="seed",
    accounting="seed",
    compute_efficiency=0.6,
    weight_bandwidth_efficiency=0.8,
    kv_bandwidth_efficiency=0.8,
    sharpness=math.inf,
    mode="overlapped",
    overhead_s=0.5e-3,
    overhead_per_seq_s=0.0,
    source="the textbook roofline: F = 0.6 of peak, B = 0.8, t0 = 0.5 ms, every weight in "
    "every token's FLOPs",
)

# ---------------------------------------------------------------------------------------------
# The measured calibrations: fitted by scripts/fit_calibrations.py (its output, pasted) to the
# reference points in data/aiconfigurator/ (AIConfigurator 0.12.0, vLLM backend database:
# 0.24.0 tables for H100 SXM, H200, B200 and L40S, 0.14.0 for A100 SXM). GPU time only: the
# database measures kernels, not the engine's CPU, so t0 and the per-sequence part are the CPU
# figures below, not fitted here (`budgettune profile` on the live engine fits them).
MEASURED_SOURCE = "fitted to NVIDIA AIConfigurator 0.12.0's silicon-measured vLLM database"
# CPU time per iteration: fixed plus per sequence. Public figures for vLLM on a GPU are
# measured on other engines and versions; these are kept at the seed's t0 with no per-sequence
# part until a profile of the live engine says otherwise.
MEASURED_OVERHEAD_S = 0.5e-3
MEASURED_OVERHEAD_PER_SEQ_S = 0.0
# GPU time per layer that no tensor split shortens (kernel launches and tails), one figure for
# every GPU, and more of it when the iteration holds a prompt chunk (the prompt's attention
# kernel): fitted with the table below to the one-GPU reference points, nothing else (the
# split ones are held out).
MEASURED_LAYER_FLOOR_S = 28e-6
MEASURED_PREFILL_LAYER_FLOOR_S = 32e-6

_FITTED: dict[str, tuple[float, float, float, float, str]] = {
    # gpu: (compute, weight bandwidth, KV bandwidth, sharpness, mode), shares of peak
    "a100-80g": (0.876, 0.686, 0.725, 1.526, "serialized"),
    "b200": (0.651, 0.810, 0.832, 1.855, "serialized"),
    "h100-sxm": (0.738, 0.807, 0.838, 2.535, "serialized"),
    "h200": (0.748, 0.771, 0.852, 2.156, "serialized"),
    "l40s": (0.583, 0.777, 0.722, 2.429, "serialized"),
}
# GPU presets the database does not cover take their nearest sibling's figures, said so.
SIBLINGS = {"h100-pcie": "h100-sxm", "a100-40g": "a100-80g", "a6000": "l40s"}
CUSTOM_SIBLING = "h100-sxm"  # a GPU described by its peaks alone


def _measured(gpu: str) -> Calibration:
    sibling = gpu if gpu in _FITTED else SIBLINGS.get(gpu, CUSTOM_SIBLING)
    compute, weights, kv, sharpness, mode = _FITTED[sibling]
    source = f"{MEASURED_SOURCE} ({sibling})"
    if sibling != gpu:
        source = (
            f"{MEASURED_SOURCE}: {gpu} not covered, estimated from its nearest sibling, "
            f"{sibling}'s figures"
        )
    return Calibration(
        name="measured",
        accounting="engine",
        compute_efficiency=compute,
        weight_bandwidth_efficiency=weights,
        kv_bandwidth_efficiency=kv,
        sharpness=sharpness,
        mode=mode,
        overhead_s=MEASURED_OVERHEAD_S,
        overhead_per_seq_s=MEASURED_OVERHEAD_PER_SEQ_S,
        source=source,
        layer_floor_s=MEASURED_LAYER_FLOOR_S,
        prefill_layer_floor_s=MEASURED_PREFILL_LAYER_FLOOR_S,
    )


def calibration_for(name: str, gpu: str) -> Calibration:
    """The calibration ``name`` (``measured`` or ``seed``) for the GPU preset ``gpu`` (any other
    name, e.g. "custom": the measured figures of h100-sxm). Raises SpecError on field
    ``calibration`` for an unknown name."""
    key = name.strip().lower()
    if key == "seed":
        return SEED
    if key == "measured":
        return _measured(gpu.strip().lower())
    raise SpecError(
        f"unknown calibration {name!r}; use one of: {', '.join(CALIBRATIONS)}",
        field="calibration",
    )


def fitted_gpus() -> tuple[str, ...]:
    """The GPU presets with figures of their own in the measured table."""
    return tuple(_FITTED)


@dataclass(frozen=True, slots=True)
class CalibrationChoice:
    """What a user asked for: a calibration by name and the figures given instead of its own
    (None keeps the calibration's; ``overhead_ms`` in milliseconds, as the options read)."""

    calibration: str = DEFAULT_CALIBRATION
    compute_efficiency: float | None = None
    bandwidth_efficiency: float | None = None
    kv_bandwidth_efficiency: float | None = None
    overhead_ms: float | None = None
    mode: str | None = None

    def resolve(self, gpu: str) -> Calibration:
        """The calibration for the GPU preset ``gpu`` with the given figures in. Raises
        SpecError naming the field of an unknown name or a value out of range."""
        return calibration_for(self.calibration, gpu).with_overrides(
            compute_efficiency=self.compute_efficiency,
            bandwidth_efficiency=self.bandwidth_efficiency,
            kv_bandwidth_efficiency=self.kv_bandwidth_efficiency,
            overhead_s=None if self.overhead_ms is None else self.overhead_ms / 1e3,
            mode=self.mode,
        )

    def given(self) -> dict[str, float | str]:
        """The calibration's name and every figure given, by field name."""
        out: dict[str, float | str] = {"calibration": self.calibration}
        for name in (
            "compute_efficiency",
            "bandwidth_efficiency",
            "kv_bandwidth_efficiency",
            "overhead_ms",
            "mode",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out
