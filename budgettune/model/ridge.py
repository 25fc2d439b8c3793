"""The prefill knee: a continuous two-segment fit of prefill time against tokens (scipy), P* with
a bootstrap interval, and the plain statement, with the linear fit, when no knee shows inside
the measured range. Relative errors are weighed, as times span orders of magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize, stats

from budgettune.model.profile import Probe, RidgeFit

FloatArray = npt.NDArray[np.float64]

MIN_KNEE_POINTS = 6  # distinct prefill sizes needed before a knee is looked for
SIDE_POINTS = 3  # sizes needed on each side of a knee to call it one
KNEE_P_VALUE = 0.01  # two segments must beat one line at this significance
# Slope below the knee at most this share of the slope above: a bend of 15% or more. Measured
# GPU curves bend softly (AIConfigurator's: 0.43-0.79 on the shipped reference curves), so a
# stricter bar (0.5, before issue 15) called real knees "no knee"; a straight line with noise
# fails it, or the F-test below.
KNEE_SLOPE_RATIO = 0.85
FLAT_RATIO = 1.25  # max/min prefill time under this: flat, memory- or overhead-bound throughout
KNEE_MAX_FIT_ERROR = 0.10  # a knee from a two-segment fit worse than this is not believed
_GRID_KNEES = 320


@dataclass(slots=True, frozen=True)
class _Hinge:
    knee_x: float
    intercept: float
    slope_below: float
    slope_above: float  # total slope above the knee
    rss: float


def _hinge_rss(
    x: FloatArray, y: FloatArray, w2: FloatArray, knees: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Weighted least squares of y = a + s1 x + s2 max(x - k, 0) for every knee k at once."""
    hinge = np.maximum(x[None, :] - knees[:, None], 0.0)
    design = np.stack([np.ones_like(hinge), np.broadcast_to(x, hinge.shape), hinge], axis=2)
    weighted = design * w2[None, :, None]
    normal = np.einsum("kni,knj->kij", weighted, design)
    rhs = np.einsum("kni,n->ki", weighted, y)
    # A tiny ridge keeps a knee past every point (hinge column all zero) solvable.
    normal = normal + np.eye(3)[None] * 1e-18 * np.trace(normal, axis1=1, axis2=2)[:, None, None]
    beta = np.linalg.solve(normal, rhs[..., None])[..., 0]
    resid = y[None, :] - np.einsum("kni,ki->kn", design, beta)
    return np.sum(w2[None, :] * resid**2, axis=1), beta


def _fit_hinge(x: FloatArray, y: FloatArray, knees: FloatArray, *, refine: bool) -> _Hinge:
    w2 = 1.0 / y**2
    rss, beta = _hinge_rss(x, y, w2, knees)
    i = int(np.argmin(rss))
    knee = float(knees[i])
    if refine:
        lo, hi = float(knees[max(i - 1, 0)]), float(knees[min(i + 1, len(knees) - 1)])
        if hi > lo:
            res = optimize.minimize_scalar(
                lambda k: float(_hinge_rss(x, y, w2, np.array([k]))[0][0]),
                bounds=(lo, hi),
                method="bounded",
                options={"xatol": 1e-4 * knee},
            )
            if float(res.fun) <= float(rss[i]):
                knee = float(res.x)
        rss_k, beta_k = _hinge_rss(x, y, w2, np.array([knee]))
        b = beta_k[0]
        return _Hinge(knee, float(b[0]), float(b[1]), float(b[1] + b[2]), float(rss_k[0]))
    b = beta[i]
    return _Hinge(knee, float(b[0]), float(b[1]), float(b[1] + b[2]), float(rss[i]))


def _to_tokens(x: float, q: float) -> float:
    """Invert x = P + q P^2 for P >= 0."""
    if q <= 0:
        return x
    return (math.sqrt(1.0 + 4.0 * q * x) - 1.0) / (2.0 * q)


def fit_ridge(
    probes: Sequence[Probe],
    *,
    attention_ratio: float = 0.0,
    rng: np.random.Generator,
    bootstrap: int = 200,
) -> RidgeFit:
    """Two-segment fit of prefill time against tokens; P* with a bootstrap 95% interval.

    The fit runs in effective tokens x = P + q P^2 (q = ``attention_ratio``), where a prompt's
    compute time is exactly linear; the knee is reported back in tokens. On a soft curve it is
    where the best two lines meet (stable within ~15% over the probed ranges tried on the
    shipped reference curves). A knee is reported only when two segments beat one line (F-test
    p < 0.01), the slope rises by 15% or more across it, the two segments fit within 10% median
    error and at least 3 sizes lie on each side; otherwise ``knee_found`` is False and
    ``reason`` says why.
    """
    prefill = [p for p in probes if p.series == "prefill" and p.times_s and p.median_s > 0]
    main = sorted((p for p in prefill if p.tag != "tile"), key=lambda p: p.prompt_tokens)
    tile_ratios = _tile_ratios(prefill)
    tokens = np.array([p.prompt_tokens for p in main], dtype=np.float64)
    y = np.array([p.median_s for p in main], dtype=np.float64)
    q = attention_ratio
    x = tokens + q * tokens**2
    n = len(main)
    if n < 2:
        return RidgeFit(
            knee_found=False,
            reason=f"only {n} prefill size(s) measured: nothing to fit",
            knee_tokens=None,
            ci_low_tokens=None,
            ci_high_tokens=None,
            linear_intercept_s=math.nan,
            linear_slope_s_per_token=math.nan,
            linear_median_rel_error=math.nan,
            tile_ratios=tile_ratios,
            attention_ratio=q,
        )
    w2 = 1.0 / y**2
    design = np.stack([np.ones_like(x), x], axis=1)
    lin = np.linalg.solve(design.T @ (design * w2[:, None]), design.T @ (w2 * y))
    lin_pred = design @ lin
    lin_rss = float(np.sum(w2 * (y - lin_pred) ** 2))
    lin_err = float(np.median(np.abs(lin_pred - y) / y))
    common = {
        "linear_intercept_s": float(lin[0]),
        "linear_slope_s_per_token": float(lin[1]),
        "linear_median_rel_error": lin_err,
        "tokens_min": int(tokens[0]),
        "tokens_max": int(tokens[-1]),
        "tile_ratios": tile_ratios,
        "attention_ratio": q,
    }
    lo_t, hi_t = int(tokens[0]), int(tokens[-1])

    def no_knee(reason: str, **extra: float | None) -> RidgeFit:
        return RidgeFit(
            knee_found=False,
            reason=reason,
            knee_tokens=None,
            ci_low_tokens=None,
            ci_high_tokens=None,
            **common,  # type: ignore[arg-type]
            **extra,  # type: ignore[arg-type]
        )

    if n < MIN_KNEE_POINTS:
        return no_knee(
            f"only {n} prefill sizes measured (need {MIN_KNEE_POINTS}) to look for a knee"
        )
    spread = float(np.max(y) / np.min(y))
    if spread < FLAT_RATIO:
        return no_knee(
            f"prefill time barely changes from {lo_t} to {hi_t} tokens (x{spread:.2f}): "
            f"every size is memory- or overhead-bound; the knee lies above {hi_t} tokens"
        )
    knees = np.geomspace(x[1], x[-2], _GRID_KNEES)
    hinge = _fit_hinge(x, y, knees, refine=True)
    hinge_pred = (
        hinge.intercept
        + hinge.slope_below * x
        + (hinge.slope_above - hinge.slope_below) * np.maximum(x - hinge.knee_x, 0.0)
    )
    dof = n - 4
    f_stat = ((lin_rss - hinge.rss) / 2.0) / (hinge.rss / dof) if hinge.rss > 0 else math.inf
    p_value = float(stats.f.sf(f_stat, 2, dof)) if math.isfinite(f_stat) else 0.0
    extra: dict[str, float | None] = {
        "hinge_slope_below_s_per_token": hinge.slope_below,
        "hinge_slope_above_s_per_token": hinge.slope_above,
        "hinge_median_rel_error": float(np.median(np.abs(hinge_pred - y) / y)),
        "p_value": p_value,
    }
    knee_p = _to_tokens(hinge.knee_x, q)
    below = int(np.sum(x <= hinge.knee_x))
    linear_says = (
        f"prefill time grows linearly from {lo_t} to {hi_t} tokens (one line fits within "
        f"{lin_err:.1%} median error): no knee inside the measured range"
    )
    if hinge.slope_above <= 0 or hinge.slope_below >= KNEE_SLOPE_RATIO * hinge.slope_above:
        return no_knee(linear_says, **extra)
    hinge_err = extra["hinge_median_rel_error"]
    if hinge_err is not None and hinge_err > KNEE_MAX_FIT_ERROR:
        return no_knee(
            f"prefill times from {lo_t} to {hi_t} tokens are too irregular for a two-segment fit "
            f"(median error {hinge_err:.0%}): no knee reported; measure on a quiet machine",
            **extra,
        )
    if p_value >= KNEE_P_VALUE:
        return no_knee(
            f"{linear_says} (two segments are not significantly better, p={p_value:.2g})", **extra
        )
    if below < SIDE_POINTS or n - below < SIDE_POINTS:
        return no_knee(
            f"the best bend (~{knee_p:.0f} tokens) sits at the edge of the measured range "
            f"{lo_t}..{hi_t} with fewer than {SIDE_POINTS} sizes on one side: no knee reported",
            **extra,
        )
    ci: tuple[float | None, float | None] = (None, None)
    samples = _bootstrap_knees(main, x, y, hinge_pred, knees, rng, bootstrap)
    if len(samples):
        lo_x, hi_x = np.percentile(samples, [2.5, 97.5])
        ci = (_to_tokens(float(lo_x), q), _to_tokens(float(hi_x), q))
    return RidgeFit(
        knee_found=True,
        reason=f"knee at {knee_p:.0f} tokens (two segments beat one line, p={p_value:.2g})",
        knee_tokens=knee_p,
        ci_low_tokens=ci[0],
        ci_high_tokens=ci[1],
        bootstrap_samples=len(samples),
        **common,  # type: ignore[arg-type]
        **extra,  # type: ignore[arg-type]
    )


def _bootstrap_knees(
    main: Sequence[Probe],
    x: FloatArray,
    y: FloatArray,
    fitted: FloatArray,
    knees: FloatArray,
    rng: np.random.Generator,
    count: int,
) -> FloatArray:
    """Knees refitted on resampled data: the repeats of each size when every size has 3 or more,
    otherwise the relative residuals of the fit (a residual bootstrap)."""
    repeats = [np.asarray(p.times_s, dtype=np.float64) for p in main]
    stratified = all(len(r) >= 3 for r in repeats)
    rel_resid = (y - fitted) / fitted
    out = np.empty(count)
    for i in range(count):
        if stratified:
            yb = np.array([np.median(rng.choice(r, size=len(r), replace=True)) for r in repeats])
        else:
            yb = fitted * (1.0 + rng.choice(rel_resid, size=len(y), replace=True))
        out[i] = _fit_hinge(x, yb, knees, refine=False).knee_x
    return out


def _tile_ratios(prefill: Sequence[Probe]) -> dict[str, float]:
    """t(P) / t(P - 1) for every tile probe P whose round neighbour P - 1 was measured."""
    by_tokens = {p.prompt_tokens: p for p in prefill if p.tag != "tile"}
    out = {}
    for probe in prefill:
        base = by_tokens.get(probe.prompt_tokens - 1)
        if probe.tag == "tile" and base is not None and base.median_s > 0:
            out[f"{probe.prompt_tokens}/{base.prompt_tokens}"] = probe.median_s / base.median_s
    return out
