"""The step-time model fit over a profile's probes: t0, achievable FLOP/s, weight and KV-cache
bandwidth, the knee's sharpness and the overlap variant, by robust weighted least squares of
relative errors over all three series (iteration times span three orders of magnitude). The
prefill knee is in :mod:`.ridge`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize

from budgettune.model.probe_work import (
    MIN_REL_SIGMA,
    FloatArray,
    ShapeConstants,
    Work,
    model_errors,
    model_predict_s,
    predict_s,
    probe_work,
    relative_sigma,
)
from budgettune.model.profile import Probe, SeriesError, StepFit
from budgettune.model.ridge import fit_ridge
from budgettune.model.stepmodel import MODES, StepModel

# fit_ridge moved to .ridge and the probes' work to .probe_work; importing them from here keeps
# working for earlier callers.
__all__ = [
    "ShapeConstants",
    "Work",
    "fit_ridge",
    "fit_step_model",
    "holdout_mask",
    "model_errors",
    "model_predict_s",
    "predict_s",
    "preset_figures",
    "probe_work",
    "relative_sigma",
    "series_errors",
]

# Step fit: residuals are relative errors over each probe's own uncertainty (quiet probes weigh
# more than noisy ones); beyond ROBUST_SCALE of those units they count linearly, not squared.
ROBUST_SCALE = 3.0
MODE_MARGIN = 0.05  # one variant must fit 5% better (robust objective) to be preferred
# The per-sequence cost is kept only if it cuts the robust misfit by a quarter: on a GPU (or the
# sim engine) it is noise, and a free parameter must not trade off against B.
PER_SEQ_MARGIN = 0.25
MAX_SHARPNESS = 64.0  # p of the soft roofline: at 64 it is a hard max to 1.1% at the ridge
_T0_HELD_S = 1e-9  # t0's bound when it is known to be zero (a bound must sit above zero)


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
    kv_bytes_per_s: float | None = None  # None: the weights' bandwidth
    sharpness: float = math.inf

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
            kv_bytes_per_s=self.kv_bytes_per_s,
            sharpness=self.sharpness,
        )
        return step + self.extra_s(work, mask)


@dataclass(slots=True, frozen=True)
class _Layout:
    """Where each parameter sits in the solver's vector: log F, log B, t0 always; then, as
    asked, log B_kv, log p, the request overhead (fixed, per token) and the per-sequence cost."""

    kv: int | None
    soft: int | None
    offset: int | None
    per_seq: int | None
    size: int

    @classmethod
    def of(cls, *, kv: bool, soft: bool, offset: bool, per_seq: bool) -> _Layout:
        at = 3
        slots: dict[str, int | None] = {}
        for name, wanted, width in (
            ("kv", kv, 1),
            ("soft", soft, 1),
            ("offset", offset, 2),
            ("per_seq", per_seq, 1),
        ):
            slots[name] = at if wanted else None
            at += width if wanted else 0
        return cls(size=at, **slots)


def _solve(
    work: Work,
    mode: str,
    offset_mask: npt.NDArray[np.bool_],
    *,
    per_seq: bool = False,
    kv: bool = False,
    soft: bool = False,
    t0_known: bool = False,
) -> _Solution:
    """Robust weighted least squares of relative residuals (each over its probe's uncertainty;
    soft L1 beyond ROBUST_SCALE, so one disturbed probe cannot pull the fit) from several
    starts; the best solution wins. per_seq: also fit a cost per sequence; kv: a KV-cache
    bandwidth of its own; soft: the sharpness of the soft roofline (else a hard max);
    t0_known: the times hold no CPU time (a database's), so t0 is held at zero."""
    y = work.time_s
    sigma = work.rel_sigma
    total_bytes = work.weight_bytes + work.decode_kv_bytes
    # y >= flops / F and y >= bytes / B, so these are lower bounds on F and B.
    f_low = float(np.max(work.flops / y))
    b_low = float(np.max(total_bytes / y))
    kv_low = float(np.max(work.decode_kv_bytes / y))
    kv = kv and kv_low > 0
    has_offset = bool(offset_mask.any())
    y_min = float(np.min(y[~offset_mask])) if (~offset_mask).any() else float(np.min(y))

    # The request overhead of TTFT-timed probes: a fixed part plus a part per prompt token (the
    # server parses, checks and hands over the prompt's token ids before scheduling it).
    per_token_high = float(np.max(y)) / max(float(np.max(work.prompt_tokens)), 1.0)
    per_seq = per_seq and bool((work.decodes > 0).any())
    # A sequence cannot cost more than the slowest probe with decodes over its batch.
    per_seq_high = float(np.max(y / np.maximum(work.sequences, 1.0))) if per_seq else 0.0
    at = _Layout.of(kv=kv, soft=soft, offset=has_offset, per_seq=per_seq)

    def unpack(theta: FloatArray) -> tuple[float, float, float, float, float]:
        """(B_kv or 0, p, offset fixed, offset per token, per sequence) of ``theta``."""
        return (
            math.exp(theta[at.kv]) if at.kv is not None else 0.0,
            math.exp(theta[at.soft]) if at.soft is not None else math.inf,
            theta[at.offset] if at.offset is not None else 0.0,
            theta[at.offset + 1] if at.offset is not None else 0.0,
            theta[at.per_seq] if at.per_seq is not None else 0.0,
        )

    def residuals(theta: FloatArray) -> FloatArray:
        kv_bw, p, fixed, per_token, seq = unpack(theta)
        pred = predict_s(
            work,
            math.exp(theta[0]),
            math.exp(theta[1]),
            theta[2],
            mode,
            seq,
            kv_bytes_per_s=kv_bw or None,
            sharpness=p,
        )
        if has_offset:
            pred = pred + (fixed + per_token * work.prompt_tokens) * offset_mask
        return (pred - y) / y / sigma

    low = np.zeros(at.size)
    high = np.zeros(at.size)
    scale = np.ones(at.size)
    low[:3] = [math.log(f_low * 0.5), math.log(b_low * 0.5), 0.0]
    high[:3] = [math.log(f_low * 1e6), math.log(b_low * 1e6), _T0_HELD_S if t0_known else y_min]
    scale[2] = y_min
    if at.kv is not None:
        low[at.kv], high[at.kv] = math.log(kv_low * 0.5), math.log(kv_low * 1e6)
    if at.soft is not None:
        low[at.soft], high[at.soft] = 0.0, math.log(MAX_SHARPNESS)
    if at.offset is not None:
        high[at.offset : at.offset + 2] = [float(np.max(y)), per_token_high]
        scale[at.offset : at.offset + 2] = [y_min, per_token_high * 1e-3]
    if at.per_seq is not None:
        high[at.per_seq] = per_seq_high
        scale[at.per_seq] = per_seq_high * 0.1
    best: _Solution | None = None
    for f_scale in (1.0, 3.0):
        for b_scale in (1.0, 3.0):
            for t0_share in (0.05, 0.5):
                start = np.zeros(at.size)
                t0_start = _T0_HELD_S / 2 if t0_known else y_min * t0_share
                start[:3] = [math.log(f_low * f_scale), math.log(b_low * b_scale), t0_start]
                if at.kv is not None:
                    start[at.kv] = math.log(kv_low * b_scale)
                if at.soft is not None:
                    start[at.soft] = math.log(4.0)
                if at.offset is not None:
                    start[at.offset] = float(np.min(y[offset_mask])) * 0.1
                if at.per_seq is not None:
                    start[at.per_seq] = per_seq_high * 0.1
                result = optimize.least_squares(
                    residuals,
                    np.clip(start, low + 1e-12, high - 1e-12),
                    bounds=(low, high),
                    x_scale=scale,
                    method="trf",
                    loss="soft_l1",
                    f_scale=ROBUST_SCALE,
                )
                cost = float(result.cost)
                if best is None or cost < best.cost:
                    theta = result.x
                    kv_bw, p, fixed, per_token, seq = unpack(theta)
                    best = _Solution(
                        mode,
                        math.exp(theta[0]),
                        math.exp(theta[1]),
                        float(theta[2]),
                        float(fixed),
                        float(per_token),
                        cost,
                        float(seq),
                        kv_bw or None,
                        p,
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


def _chosen_mode(
    solutions: Mapping[str, _Solution], work: Work, offset_mask: npt.NDArray[np.bool_]
) -> tuple[str, str, dict[str, float]]:
    """The overlap variant the fit keeps, why, and each variant's weighted misfit: the one that
    fits better by more than MODE_MARGIN, else overlapped."""
    best_mode = min(MODES, key=lambda m: solutions[m].cost)
    other = "serialized" if best_mode == "overlapped" else "overlapped"
    cost = {m: float(solutions[m].cost) for m in MODES}
    median = {
        m: float(np.median(np.abs(solutions[m].predict(work, offset_mask) / work.time_s - 1.0)))
        for m in MODES
    }
    if cost[other] < (1.0 + MODE_MARGIN) * cost[best_mode] + 1e-6:
        reason = (
            f"the two variants fit alike (weighted misfit {cost['overlapped']:.3g} overlapped, "
            f"{cost['serialized']:.3g} serialized); overlapped kept"
        )
        return "overlapped", reason, cost
    reason = (
        f"{best_mode} fits better: weighted misfit {cost[best_mode]:.3g} vs "
        f"{cost[other]:.3g} for {other}, median error {median[best_mode]:.1%} vs "
        f"{median[other]:.1%}"
    )
    return best_mode, reason, cost


def fit_step_model(
    probes: Sequence[Probe],
    shape: ShapeConstants,
    *,
    request_overhead_series: Sequence[str] = (),
    preset: StepModel | None = None,
    holdout_every: int = 3,
    cpu_free: bool = False,
) -> StepFit:
    """Fit t0, F, B, the KV-cache bandwidth, the knee's sharpness and the overlap variant to all
    three series at once, in ``shape``'s accounting; a per-sequence cost where it pays.

    In the engine accounting the KV bandwidth is fitted apart from B when decodes were probed
    at two contexts or more (else it is B), and the knee's sharpness; the seed accounting has
    one bandwidth and a hard max.
    request_overhead_series: series whose times include a request overhead (TTFT through HTTP);
    it is fitted apart, a fixed part plus a part per prompt token. cpu_free: the times are GPU
    time only (a database's estimates), so t0 and the per-sequence cost are held at zero.
    Raises ValueError with fewer than 4 usable probes.
    """
    work = probe_work(probes, shape)
    if len(work.time_s) < 4:
        raise ValueError(
            f"need at least 4 measured probes to fit the step-time model, got {len(work.time_s)}"
        )
    contexts = {p.context_tokens for p in probes if p.batch > 0 and p.tag != "tile" and p.times_s}
    engine = shape.accounting == "engine"  # the seed's: one bandwidth and a hard max
    flags = {"kv": engine and len(contexts) >= 2, "soft": engine, "t0_known": cpu_free}
    offset_mask = np.array([s in request_overhead_series for s in work.series], dtype=bool)
    solutions = {mode: _solve(work, mode, offset_mask, **flags) for mode in MODES}
    # Second pass: a series the model describes less well than its repeats suggest (TTFT through
    # a busy HTTP stack has bursty noise that a few repeats do not show) weighs accordingly.
    first = solutions[min(MODES, key=lambda m: solutions[m].cost)]
    work = _with_series_noise(work, first, offset_mask)
    solutions = {mode: _solve(work, mode, offset_mask, **flags) for mode in MODES}
    best_mode, mode_reason, cost = _chosen_mode(solutions, work, offset_mask)
    sol = solutions[best_mode]
    with_seq = _solve(work, best_mode, offset_mask, per_seq=True, **flags)
    per_seq = not cpu_free and with_seq.cost < (1.0 - PER_SEQ_MARGIN) * sol.cost
    if per_seq:
        sol = with_seq
    errors = series_errors(work, sol.predict(work, offset_mask))

    holdout: dict[str, SeriesError] = {}
    holdout_all: SeriesError | None = None
    held = holdout_mask(work, holdout_every)
    if held.any() and (~held).sum() >= 4:
        train = work.subset(~held)
        test = work.subset(held)
        hsol = _solve(train, best_mode, offset_mask[~held], per_seq=per_seq, **flags)
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
        notes=_identification_notes(work, sol, cpu_free=cpu_free),
        preset=None if preset is None else preset_figures(preset),
        cost_by_mode=cost,
        overhead_per_seq_s=sol.overhead_per_seq_s,
        kv_bytes_per_s=sol.kv_bytes_per_s,
        sharpness=sol.sharpness,
        accounting=shape.accounting,
    )


def preset_figures(model: StepModel) -> dict[str, float]:
    """The figures of a preset model a profile shows beside its fit (``StepFit.preset``)."""
    figures = {
        "flops_per_s": model.flops_per_s,
        "bytes_per_s": model.bytes_per_s,
        "overhead_s": model.overhead_s,
    }
    if model.accounting == "engine":
        figures["kv_bytes_per_s"] = model.kv_streaming_bytes_per_s
        figures["overhead_per_seq_s"] = model.overhead_per_seq_s
    return figures


def _identification_notes(work: Work, sol: _Solution, *, cpu_free: bool) -> tuple[str, ...]:
    """Say which parameters the data pin down: a bound with no active probe is only a bound."""
    compute = work.flops / sol.flops_per_s
    kv_bw = sol.kv_bytes_per_s or sol.bytes_per_s
    memory = work.weight_bytes / sol.bytes_per_s + work.decode_kv_bytes / kv_bw
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
            f"a cost of {sol.overhead_per_seq_s * 1e3:.3g} ms per sequence in the batch, beyond "
            "the roofline, was fitted: it cut the weighted misfit by over "
            f"{PER_SEQ_MARGIN:.0%} (typical of a CPU)"
        )
    if cpu_free:
        notes.append(
            "GPU time only: t0 and the cost per sequence are held at zero, so predictions from "
            "this profile include no CPU time"
        )
    elif sol.overhead_s < 1e-7:
        notes.append("t0 fitted at zero: the fixed per-iteration overhead is too small to resolve")
    return tuple(notes)
