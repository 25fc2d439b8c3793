"""The step-time model fit over a profile's probes: t0, achievable FLOP/s and bandwidth and the
overlap variant, by robust weighted least squares of relative errors over all three series
(iteration times span three orders of magnitude). The prefill knee is in :mod:`.ridge`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize

from budgettune.model.profile import Probe, SeriesError, StepFit
from budgettune.model.ridge import fit_ridge
from budgettune.model.stepmodel import MODES, StepModel

FloatArray = npt.NDArray[np.float64]

# fit_ridge moved to .ridge; importing it from here keeps working for earlier callers.
__all__ = [
    "ShapeConstants",
    "Work",
    "fit_ridge",
    "fit_step_model",
    "holdout_mask",
    "predict_s",
    "probe_work",
    "relative_sigma",
    "series_errors",
]

# Step fit: residuals are relative errors over each probe's own uncertainty (quiet probes weigh
# more than noisy ones); beyond ROBUST_SCALE of those units they count linearly, not squared.
ROBUST_SCALE = 3.0
DEFAULT_REL_SIGMA = 0.02
MIN_REL_SIGMA = 0.003
MODE_MARGIN = 0.05  # one variant must fit 5% better (robust objective) to be preferred
# The per-sequence decode cost is kept only if it cuts the robust misfit by a quarter: on a GPU
# (or the sim engine) it is noise, and a free parameter must not trade off against B.
PER_SEQ_MARGIN = 0.25


@dataclass(slots=True, frozen=True)
class ShapeConstants:
    """The model-side constants of the step-time model (known, never fitted)."""

    params: float
    weight_bytes: float
    kv_bytes_per_token: float
    attention_flops_per_pair: float

    @classmethod
    def of(cls, model: StepModel) -> ShapeConstants:
        return cls(
            model.params,
            model.weight_bytes,
            model.kv_bytes_per_token,
            model.attention_flops_per_pair,
        )

    @property
    def attention_ratio(self) -> float:
        """q in effective tokens x = P + q P^2: a prompt's FLOPs are 2N x (attention included)."""
        return self.attention_flops_per_pair / (4.0 * self.params)


@dataclass(slots=True, frozen=True)
class Work:
    """Per probe: FLOPs, weight + prompt-prefix bytes, decode KV bytes, the measured median and
    the relative uncertainty of that median (its weight in the fit)."""

    series: tuple[str, ...]
    flops: FloatArray
    weight_bytes: FloatArray
    decode_kv_bytes: FloatArray
    time_s: FloatArray
    rel_sigma: FloatArray
    prompt_tokens: FloatArray
    decodes: FloatArray

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
    pairs = prompt * prompt / 2.0 + batch * context
    return Work(
        series=tuple(p.series for p in used),
        flops=2.0 * shape.params * (prompt + batch) + shape.attention_flops_per_pair * pairs,
        weight_bytes=np.full(len(used), shape.weight_bytes),
        decode_kv_bytes=shape.kv_bytes_per_token * batch * context,
        time_s=np.array([p.median_s for p in used], dtype=np.float64),
        rel_sigma=np.array([relative_sigma(p.times_s) for p in used], dtype=np.float64),
        prompt_tokens=prompt,
        decodes=batch,
    )


def predict_s(
    work: Work,
    flops_per_s: float,
    bytes_per_s: float,
    overhead_s: float,
    mode: str,
    overhead_per_seq_s: float = 0.0,
) -> FloatArray:
    """Vectorised :meth:`StepModel.step_time_s` over the probes of ``work``."""
    compute = work.flops / flops_per_s
    fixed = overhead_s + overhead_per_seq_s * work.decodes
    if mode == "serialized":
        memory = work.weight_bytes / bytes_per_s
        return fixed + np.maximum(compute, memory) + work.decode_kv_bytes / bytes_per_s
    return fixed + np.maximum(compute, (work.weight_bytes + work.decode_kv_bytes) / bytes_per_s)


# ---------------------------------------------------------------------------------------------
# The step-time model


@dataclass(slots=True, frozen=True)
class _Solution:
    mode: str
    flops_per_s: float
    bytes_per_s: float
    overhead_s: float
    request_overhead_s: float
    request_overhead_s_per_token: float
    cost: float  # the robust objective over the weighted relative residuals
    overhead_per_seq_s: float = 0.0

    def extra_s(self, work: Work, mask: npt.NDArray[np.bool_]) -> FloatArray:
        """The request overhead of the probes in ``mask`` (zero elsewhere)."""
        per_token = self.request_overhead_s_per_token * work.prompt_tokens
        return (self.request_overhead_s + per_token) * mask

    def predict(self, work: Work, mask: npt.NDArray[np.bool_]) -> FloatArray:
        step = predict_s(
            work,
            self.flops_per_s,
            self.bytes_per_s,
            self.overhead_s,
            self.mode,
            self.overhead_per_seq_s,
        )
        return step + self.extra_s(work, mask)


def _solve(
    work: Work, mode: str, offset_mask: npt.NDArray[np.bool_], *, per_seq: bool = False
) -> _Solution:
    """Robust weighted least squares of relative residuals (each over its probe's uncertainty;
    soft L1 beyond ROBUST_SCALE, so one disturbed probe cannot pull the fit) from several
    starts; the best solution wins. per_seq: also fit a cost per decode sequence (the last
    parameter)."""
    y = work.time_s
    sigma = work.rel_sigma
    total_bytes = work.weight_bytes + work.decode_kv_bytes
    # y >= flops / F and y >= bytes / B, so these are lower bounds on F and B.
    f_low = float(np.max(work.flops / y))
    b_low = float(np.max(total_bytes / y))
    has_offset = bool(offset_mask.any())
    y_min = float(np.min(y[~offset_mask])) if (~offset_mask).any() else float(np.min(y))

    # The request overhead of TTFT-timed probes: a fixed part plus a part per prompt token (the
    # server parses, checks and hands over the prompt's token ids before scheduling it).
    per_token_high = float(np.max(y)) / max(float(np.max(work.prompt_tokens)), 1.0)
    per_seq = per_seq and bool((work.decodes > 0).any())
    # A decode cannot cost more than the slowest probe with decodes over its batch.
    per_seq_high = float(np.max(y / np.maximum(work.decodes, 1.0))) if per_seq else 0.0

    def residuals(theta: FloatArray) -> FloatArray:
        extra = theta[-1] if per_seq else 0.0
        pred = predict_s(work, math.exp(theta[0]), math.exp(theta[1]), theta[2], mode, extra)
        if has_offset:
            pred = pred + (theta[3] + theta[4] * work.prompt_tokens) * offset_mask
        return (pred - y) / y / sigma

    low = [math.log(f_low * 0.5), math.log(b_low * 0.5), 0.0]
    high = [math.log(f_low * 1e6), math.log(b_low * 1e6), y_min]
    if has_offset:
        low += [0.0, 0.0]
        high += [float(np.max(y)), per_token_high]
    if per_seq:
        low.append(0.0)
        high.append(per_seq_high)
    best: _Solution | None = None
    for f_scale in (1.0, 3.0):
        for b_scale in (1.0, 3.0):
            for t0_share in (0.05, 0.5):
                start = [math.log(f_low * f_scale), math.log(b_low * b_scale), y_min * t0_share]
                if has_offset:
                    start += [float(np.min(y[offset_mask])) * 0.1, 0.0]
                if per_seq:
                    start.append(per_seq_high * 0.1)
                result = optimize.least_squares(
                    residuals,
                    np.clip(start, np.add(low, 1e-12), np.subtract(high, 1e-12)),
                    bounds=(low, high),
                    x_scale=np.array(
                        [
                            1.0,
                            1.0,
                            y_min,
                            *([y_min, per_token_high * 1e-3] if has_offset else []),
                            *([per_seq_high * 0.1] if per_seq else []),
                        ]
                    ),
                    method="trf",
                    loss="soft_l1",
                    f_scale=ROBUST_SCALE,
                )
                cost = float(result.cost)
                if best is None or cost < best.cost:
                    theta = result.x
                    best = _Solution(
                        mode,
                        math.exp(theta[0]),
                        math.exp(theta[1]),
                        float(theta[2]),
                        float(theta[3]) if has_offset else 0.0,
                        float(theta[4]) if has_offset else 0.0,
                        cost,
                        float(theta[-1]) if per_seq else 0.0,
                    )
    assert best is not None
    return best


def _with_series_noise(work: Work, sol: _Solution, offset_mask: npt.NDArray[np.bool_]) -> Work:
    """Each probe's uncertainty raised to its series' robust residual scale under ``sol``."""
    rel = np.abs(sol.predict(work, offset_mask) - work.time_s) / work.time_s
    names = np.array(work.series, dtype=object)
    sigma = work.rel_sigma.copy()
    for name in dict.fromkeys(work.series):
        members = names == name
        scale = max(1.4826 * float(np.median(rel[members])), MIN_REL_SIGMA)
        sigma[members] = np.maximum(sigma[members], scale)
    return dataclasses.replace(work, rel_sigma=sigma)


def series_errors(work: Work, predicted: FloatArray) -> dict[str, SeriesError]:
    """Median and max relative error of ``predicted`` against the measured medians, per series."""
    return _by_series(work, _relative_errors(work, predicted))


def _by_series(work: Work, rel: FloatArray) -> dict[str, SeriesError]:
    names = np.array(work.series, dtype=object)
    return {name: _summary(rel[names == name]) for name in dict.fromkeys(work.series)}


def _relative_errors(work: Work, predicted: FloatArray) -> FloatArray:
    return np.asarray(np.abs(predicted - work.time_s) / work.time_s, dtype=np.float64)


def _summary(rel: FloatArray) -> SeriesError:
    return SeriesError(len(rel), float(np.median(rel)), float(np.max(rel)))


def holdout_mask(work: Work, every: int) -> npt.NDArray[np.bool_]:
    """Every ``every``-th probe of each series (never its first or last) is held out."""
    mask = np.zeros(len(work.series), dtype=bool)
    names = np.array(work.series, dtype=object)
    for name in dict.fromkeys(work.series):
        idx = np.flatnonzero(names == name)
        for pos in range(every // 2, len(idx) - 1, every):
            if pos > 0:
                mask[idx[pos]] = True
    return mask


def fit_step_model(
    probes: Sequence[Probe],
    shape: ShapeConstants,
    *,
    request_overhead_series: Sequence[str] = (),
    preset: StepModel | None = None,
    holdout_every: int = 3,
) -> StepFit:
    """Fit t0, F, B and the overlap variant to all three series at once.

    request_overhead_series: series whose times include a request overhead (TTFT through HTTP);
    it is fitted apart, a fixed part plus a part per prompt token. Raises ValueError with fewer
    than 4 usable probes.
    """
    work = probe_work(probes, shape)
    if len(work.time_s) < 4:
        raise ValueError(
            f"need at least 4 measured probes to fit the step-time model, got {len(work.time_s)}"
        )
    offset_mask = np.array([s in request_overhead_series for s in work.series], dtype=bool)
    solutions = {mode: _solve(work, mode, offset_mask) for mode in MODES}
    # Second pass: a series the model describes less well than its repeats suggest (TTFT through
    # a busy HTTP stack has bursty noise that a few repeats do not show) weighs accordingly.
    first = solutions[min(MODES, key=lambda m: solutions[m].cost)]
    work = _with_series_noise(work, first, offset_mask)
    solutions = {mode: _solve(work, mode, offset_mask) for mode in MODES}
    best_mode = min(MODES, key=lambda m: solutions[m].cost)
    other = "serialized" if best_mode == "overlapped" else "overlapped"
    cost = {m: solutions[m].cost for m in MODES}
    median = {
        m: float(np.median(np.abs(solutions[m].predict(work, offset_mask) / work.time_s - 1.0)))
        for m in MODES
    }
    if cost[other] < (1.0 + MODE_MARGIN) * cost[best_mode] + 1e-6:
        mode_reason = (
            f"the two variants fit alike (weighted misfit {cost['overlapped']:.3g} overlapped, "
            f"{cost['serialized']:.3g} serialized); overlapped kept"
        )
        best_mode = "overlapped"
    else:
        mode_reason = (
            f"{best_mode} fits better: weighted misfit {cost[best_mode]:.3g} vs "
            f"{cost[other]:.3g} for {other}, median error {median[best_mode]:.1%} vs "
            f"{median[other]:.1%}"
        )
    sol = solutions[best_mode]
    with_seq = _solve(work, best_mode, offset_mask, per_seq=True)
    per_seq = with_seq.cost < (1.0 - PER_SEQ_MARGIN) * sol.cost
    if per_seq:
        sol = with_seq
    errors = series_errors(work, sol.predict(work, offset_mask))

    holdout: dict[str, SeriesError] = {}
    holdout_all: SeriesError | None = None
    held = holdout_mask(work, holdout_every)
    if held.any() and (~held).sum() >= 4:
        train = work.subset(~held)
        test = work.subset(held)
        hsol = _solve(train, best_mode, offset_mask[~held], per_seq=per_seq)
        rel = _relative_errors(test, hsol.predict(test, offset_mask[held]))
        holdout = _by_series(test, rel)
        holdout_all = _summary(rel)  # every held-out probe, pooled

    return StepFit(
        flops_per_s=sol.flops_per_s,
        bytes_per_s=sol.bytes_per_s,
        overhead_s=sol.overhead_s,
        mode=best_mode,
        mode_reason=mode_reason,
        request_overhead_s=sol.request_overhead_s if offset_mask.any() else None,
        request_overhead_s_per_token=sol.request_overhead_s_per_token
        if offset_mask.any()
        else None,
        request_overhead_series=tuple(s for s in request_overhead_series if s in work.series),
        errors=errors,
        holdout=holdout,
        holdout_all=holdout_all,
        notes=_identification_notes(work, sol, best_mode),
        preset=None
        if preset is None
        else {
            "flops_per_s": preset.flops_per_s,
            "bytes_per_s": preset.bytes_per_s,
            "overhead_s": preset.overhead_s,
        },
        cost_by_mode=cost,
        overhead_per_seq_s=sol.overhead_per_seq_s,
    )


def _identification_notes(work: Work, sol: _Solution, mode: str) -> tuple[str, ...]:
    """Say which parameters the data pin down: a bound with no active probe is only a bound."""
    compute = work.flops / sol.flops_per_s
    memory = (work.weight_bytes + work.decode_kv_bytes) / sol.bytes_per_s
    notes = []
    if not (memory > compute).any():
        bound = float(np.max((work.weight_bytes + work.decode_kv_bytes) / work.time_s))
        notes.append(
            f"no probe was memory-bound: the bandwidth is only a lower bound (>= {bound:.3g} B/s)"
        )
    if not (compute >= memory).any():
        notes.append(
            "no probe was compute-bound: the FLOP/s is only a lower bound "
            f"(>= {float(np.max(work.flops / work.time_s)):.3g} FLOP/s)"
        )
    if sol.overhead_per_seq_s > 0:
        notes.append(
            f"a cost of {sol.overhead_per_seq_s * 1e3:.3g} ms per decode sequence, beyond the "
            "roofline, was fitted: it cut the weighted misfit by over "
            f"{PER_SEQ_MARGIN:.0%} (typical of a CPU)"
        )
    if sol.overhead_s < 1e-7:
        notes.append("t0 fitted at zero: the fixed per-iteration overhead is too small to resolve")
    return tuple(notes)
