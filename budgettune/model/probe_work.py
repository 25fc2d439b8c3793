"""What each probe's iteration does, in the arrays the step-time fit works on: the model's
constants in an accounting (:class:`ShapeConstants`), each probe's FLOPs, bytes and sequences
(:class:`Work`), and the vectorised step time over them (:func:`predict_s`, the same arithmetic
as :meth:`~budgettune.model.stepmodel.StepModel.step_time_s`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from budgettune.model.profile import Probe
from budgettune.model.stepmodel import StepModel

FloatArray = npt.NDArray[np.float64]

DEFAULT_REL_SIGMA = 0.02  # a probe's relative uncertainty with fewer than 3 repeats
MIN_REL_SIGMA = 0.003


@dataclass(slots=True, frozen=True)
class ShapeConstants:
    """The model-side constants of the step-time model (known, never fitted), in the accounting
    of the model they came from (:meth:`of`): the parameters every token multiplies, the LM
    head's (per sampled sequence) and the weight bytes each iteration reads."""

    params: float
    weight_bytes: float
    kv_bytes_per_token: float
    attention_flops_per_pair: float
    token_params: float | None = None  # None: all of params (the seed accounting)
    head_params: float = 0.0
    streamed_weight_bytes: float | None = None  # None: all of weight_bytes

    @classmethod
    def of(cls, model: StepModel) -> ShapeConstants:
        return cls(
            model.params,
            model.weight_bytes,
            model.kv_bytes_per_token,
            model.attention_flops_per_pair,
            model.token_params,
            model.head_params,
            model.streamed_weight_bytes,
        )

    @property
    def accounting(self) -> str:
        return "seed" if self.token_params is None else "engine"

    @property
    def per_token_params(self) -> float:
        return self.params if self.token_params is None else self.token_params

    @property
    def read_weight_bytes(self) -> float:
        streamed = self.streamed_weight_bytes
        return self.weight_bytes if streamed is None else streamed

    @property
    def attention_ratio(self) -> float:
        """q in effective tokens x = P + q P^2: a prompt's FLOPs are 2 N_tokens x (attention
        included)."""
        return self.attention_flops_per_pair / (4.0 * self.per_token_params)


@dataclass(slots=True, frozen=True)
class Work:
    """Per probe: FLOPs, weight + prompt-prefix bytes, decode KV bytes, the measured median and
    the relative uncertainty of that median (its weight in the fit), and the sequences in the
    iteration (decodes plus the prompt, if any)."""

    series: tuple[str, ...]
    flops: FloatArray
    weight_bytes: FloatArray
    decode_kv_bytes: FloatArray
    time_s: FloatArray
    rel_sigma: FloatArray
    prompt_tokens: FloatArray
    decodes: FloatArray
    sequences: FloatArray

    def subset(self, mask: npt.NDArray[np.bool_]) -> Work:
        return Work(
            tuple(s for s, keep in zip(self.series, mask, strict=True) if keep),
            self.flops[mask],
            self.weight_bytes[mask],
            self.decode_kv_bytes[mask],
            self.time_s[mask],
            self.rel_sigma[mask],
            self.prompt_tokens[mask],
            self.decodes[mask],
            self.sequences[mask],
        )


def relative_sigma(times_s: Sequence[float]) -> float:
    """Relative standard error of a probe's median from the spread of its repeats (scaled MAD
    over sqrt(n)), floored; probes with fewer than 3 repeats get the default."""
    if len(times_s) < 3:
        return DEFAULT_REL_SIGMA
    values = np.asarray(times_s, dtype=np.float64)
    median = float(np.median(values))
    if median <= 0:
        return DEFAULT_REL_SIGMA
    mad = 1.4826 * float(np.median(np.abs(values - median)))
    return max(mad / median / math.sqrt(len(values)), MIN_REL_SIGMA)


def probe_work(probes: Sequence[Probe], shape: ShapeConstants) -> Work:
    """The work of each probe's iteration: one prompt chunk at offset 0 and b decodes at L."""
    used = [p for p in probes if p.tag != "tile" and p.times_s and p.median_s > 0]
    prompt = np.array([p.prompt_tokens for p in used], dtype=np.float64)
    batch = np.array([p.batch for p in used], dtype=np.float64)
    context = np.array([p.context_tokens for p in used], dtype=np.float64)
    sequences = batch + (prompt > 0)
    pairs = prompt * prompt / 2.0 + batch * context
    flops = (
        2.0 * shape.per_token_params * (prompt + batch)
        + 2.0 * shape.head_params * sequences
        + shape.attention_flops_per_pair * pairs
    )
    return Work(
        series=tuple(p.series for p in used),
        flops=flops,
        weight_bytes=np.full(len(used), shape.read_weight_bytes),
        decode_kv_bytes=shape.kv_bytes_per_token * batch * context,
        time_s=np.array([p.median_s for p in used], dtype=np.float64),
        rel_sigma=np.array([relative_sigma(p.times_s) for p in used], dtype=np.float64),
        prompt_tokens=prompt,
        decodes=batch,
        sequences=sequences,
    )


def predict_s(
    work: Work,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    mode: str,
    overhead_per_seq_s: float = 0.0,
    *,
    kv_bytes_per_s: float | None = None,
    sharpness: float = math.inf,
) -> FloatArray:
    """Vectorised :meth:`StepModel.step_time_s` over the probes of ``work``."""
    compute = work.flops / flops_per_s
    memory = work.weight_bytes / bytes_per_s
    kv = work.decode_kv_bytes / (bytes_per_s if kv_bytes_per_s is None else kv_bytes_per_s)
    fixed = overhead_s + overhead_per_seq_s * work.sequences
    if mode != "serialized":
        memory = memory + kv
        kv = np.zeros_like(kv)
    if math.isinf(sharpness):
        roof = np.maximum(compute, memory)
    else:
        roof = (compute**sharpness + memory**sharpness) ** (1.0 / sharpness)
    return np.asarray(fixed + roof + kv, dtype=np.float64)


def model_predict_s(work: Work, model: StepModel) -> FloatArray:
    """:func:`predict_s` with ``model``'s own figures (its accounting is ``work``'s), and its
    all-reduces under tensor parallelism and the work no split shortens."""
    tokens = work.prompt_tokens + work.decodes
    serial = (
        model.comm_fixed_s
        + model.unsplit_fixed_s
        + model.unsplit_prefill_s * (work.prompt_tokens > 0)
        + (model.comm_per_token_s + model.unsplit_per_token_s) * tokens
    )
    return serial + predict_s(
        work,
        model.flops_per_s,
        model.bytes_per_s,
        model.overhead_s,
        model.mode,
        model.overhead_per_seq_s,
        kv_bytes_per_s=model.kv_streaming_bytes_per_s,
        sharpness=model.sharpness,
    )


def model_errors(probes: Sequence[Probe], model: StepModel) -> FloatArray:
    """Signed relative error (model - measured) / measured of ``model`` on every usable probe
    (tile probes left out), in ``probes`` order: how a calibration is held to reference data."""
    work = probe_work(probes, ShapeConstants.of(model))
    return np.asarray(model_predict_s(work, model) / work.time_s - 1.0, dtype=np.float64)
