"""Adapter for profile files: the measured prefill curve with its spread, the fitted two-segment
curve, P* with its band, tile probes and fit errors, into the report's profile section.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping, Sequence

import numpy as np

from budgettune.core.errors import UserError
from budgettune.model.profile import Profile
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.analytic import prefill_knee_tokens
from budgettune.report.inputs import (
    ProfileCurve,
    ProfileInput,
    Provenance,
    ReportInput,
    TileProbe,
    Verdict,
)
from budgettune.report.sources import python_text


def _hinge_curve(
    profile: Profile, tokens: np.ndarray, medians_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """The fitted two-segment curve, sampled for drawing (tokens, ms). The file keeps the knee and
    both slopes; the intercept is re-solved by the fit's own weighted least squares (weights
    1/t^2), which, with the knee and slopes at their optimum, gives back the fitted intercept."""
    ridge = profile.ridge
    if ridge is None or len(tokens) < 2:
        return None
    q = float(getattr(ridge, "attention_ratio", 0.0) or 0.0)
    grid = np.geomspace(float(tokens.min()), float(tokens.max()), 80)
    x = tokens + q * tokens**2
    gx = grid + q * grid**2
    if ridge.knee_found and ridge.knee_tokens and ridge.hinge_slope_below_s_per_token is not None:
        knee_x = ridge.knee_tokens + q * ridge.knee_tokens**2
        below = ridge.hinge_slope_below_s_per_token
        above = ridge.hinge_slope_above_s_per_token or below

        def shape(v: np.ndarray) -> np.ndarray:
            return below * v + (above - below) * np.maximum(v - knee_x, 0.0)

        w2 = 1.0 / medians_s**2
        intercept = float(np.sum(w2 * (medians_s - shape(x))) / np.sum(w2))
        return grid, (intercept + shape(gx)) * 1e3
    if math.isfinite(ridge.linear_slope_s_per_token) and math.isfinite(ridge.linear_intercept_s):
        return grid, (ridge.linear_intercept_s + ridge.linear_slope_s_per_token * gx) * 1e3
    return None


def profile_curve(profile: Profile) -> ProfileCurve | None:
    prefill = sorted(profile.series("prefill"), key=lambda p: p.prompt_tokens)
    prefill = [p for p in prefill if p.times_s]
    if not prefill:
        return None
    tokens = np.array([p.prompt_tokens for p in prefill], dtype=np.float64)
    medians = np.array([p.median_s for p in prefill], dtype=np.float64)
    spread = np.array([p.spread_s for p in prefill], dtype=np.float64)
    repeated = any(len(p.times_s) > 1 for p in prefill)
    fit = _hinge_curve(profile, tokens, medians)
    measured = profile.kind != "analytic"
    return ProfileCurve(
        label=f"{profile.engine.name}"
        + (f" {profile.engine.version}" if profile.engine.version else ""),
        tokens=tokens,
        median_ms=medians * 1e3,
        lo_ms=spread[:, 0] * 1e3 if repeated else None,
        hi_ms=spread[:, 1] * 1e3 if repeated else None,
        fit_tokens=None if fit is None else fit[0],
        fit_ms=None if fit is None else fit[1],
        measured=measured,
    )


def profile_input(
    profiles: Sequence[Profile],
    *,
    floor_tokens: int | None = None,
    ceilings_tokens: Mapping[float, int] | None = None,
    ceilings_note: str | None = None,
) -> ProfileInput:
    """The profile section from one or more profiles (e.g. vLLM and torch side by side); the
    ridge, its band and the tile probes come from the first."""
    if not profiles:
        raise UserError("report: no profile given")
    drawn = [(c, p) for c, p in ((profile_curve(p), p) for p in profiles) if c is not None]
    curves = [c for c, _ in drawn]
    if len({c.label for c in curves}) < len(curves):  # e.g. two GPUs' analytic profiles
        curves = [
            dataclasses.replace(c, label=f"{c.label}, {p.hardware.name} #{i + 1}")
            for i, (c, p) in enumerate(drawn)
        ]
    main = profiles[0]
    ridge = main.ridge
    knee = ridge.knee_tokens if ridge is not None and ridge.knee_found else None
    ci = None
    if ridge is not None and ridge.ci_low_tokens is not None and ridge.ci_high_tokens is not None:
        ci = (float(ridge.ci_low_tokens), float(ridge.ci_high_tokens))
    tiles = []
    prefill = {p.prompt_tokens: p for p in main.series("prefill")}
    for probe in main.series("prefill", include_tiles=True):
        base = prefill.get(probe.prompt_tokens - 1)
        if probe.tag == "tile" and base is not None and probe.times_s and base.times_s:
            tiles.append(TileProbe(base.prompt_tokens, base.median_s * 1e3, probe.median_s * 1e3))
    errors: dict[str, str] = {}
    if main.step is not None and main.kind != "analytic":  # analytic: the model fits itself
        for series, err in main.step.errors.items():
            if err.count and math.isfinite(err.median_rel_error):
                errors[f"step-time model, {series}"] = (
                    f"median {100 * err.median_rel_error:.1f}%, max {100 * err.max_rel_error:.1f}% "
                    f"over {err.count} probes"
                )
    note = None
    if ridge is not None and not ridge.knee_found:
        note = f"No knee reported: {ridge.reason}. The dashed line is the linear fit."
    if main.kind == "analytic":
        note = (
            (note or "") + " This profile is model output from presets, not a measurement."
        ).strip()
    elif main.kind == "estimate":
        note = ((note or "") + f" This profile is a {main.label}.").strip()
    return ProfileInput(
        curves=tuple(curves),
        ridge_tokens=knee,
        ridge_ci_tokens=ci,
        knee_note=note,
        floor_tokens=floor_tokens,
        ceilings_tokens=dict(ceilings_tokens or {}),
        ceilings_note=ceilings_note,
        tile_probes=tuple(tiles),
        fit_errors=errors,
    )


def profile_report(
    profile: Profile,
    *,
    floor_tokens: int | None = None,
    ceilings_tokens: Mapping[float, int] | None = None,
    ceilings_note: str | None = None,
    others: Sequence[Profile] = (),
    profile_file: str | None = None,
) -> ReportInput:
    """A page for a profile on its own."""
    section = profile_input(
        [profile, *others],
        floor_tokens=floor_tokens,
        ceilings_tokens=ceilings_tokens,
        ceilings_note=ceilings_note,
    )
    ridge = profile.ridge
    if ridge is not None and ridge.knee_found and ridge.knee_tokens:
        headline = f"Ridge P* ≈ {ridge.knee_tokens:.0f} tokens"
        if floor_tokens:
            headline += f"; budget floor {floor_tokens} tokens"
    else:
        headline = "No knee in the measured range" + (f": {ridge.reason}" if ridge else "")
    facts = [
        ("kind", profile.label),
        ("engine", f"{profile.engine.name} {profile.engine.version or ''}".strip()),
        ("model", profile.model.source),
        ("hardware", f"{profile.hardware.name} x{profile.hardware.count}"),
    ]
    facts += [
        (f"TBT {t:g} ms reached at", f"{b} tokens")
        for t, b in sorted((ceilings_tokens or {}).items())
    ]
    if profile.step is not None:
        step = profile.step
        facts.append(
            (
                "fitted step model",
                f"F {step.flops_per_s / 1e12:.3g} TFLOP/s, B {step.bytes_per_s / 1e12:.3g} TB/s, "
                f"t0 {step.overhead_s * 1e3:.3g} ms, {step.mode}",
            )
        )
    notes = () if profile.complete else (f"Partial profile: {profile.error or 'incomplete'}",)
    return ReportInput(
        title=f"budgettune profile: {profile.model.source} on {profile.hardware.name}",
        kind="profile",
        verdict=Verdict(headline=headline, facts=tuple(facts)),
        profile=section,
        provenance=Provenance(
            versions=(
                ("budgettune", profile.budgettune_version),
                ("engine", f"{profile.engine.name} {profile.engine.version or ''}".strip()),
                ("python", python_text(profile.engine.settings.get("python_version"))),
                *_engine_command(profile),
            ),
            hardware=(
                ("hardware", f"{profile.hardware.kind}: {profile.hardware.name}"),
                ("driver", profile.hardware.driver or "-"),
            ),
            created=profile.created_utc,
            files=(("profile", profile_file),) if profile_file else (),
        ),
        notes=notes,
    )


def _engine_command(profile: Profile) -> tuple[tuple[str, str], ...]:
    """The engine's launch command as the profile recorded it (none for torch and analytic)."""
    command = profile.engine.settings.get("command")
    if isinstance(command, list) and command:
        return (("engine command", shlex.join(str(a) for a in command)),)
    return ()


def model_profile_input(
    model: StepModel,
    *,
    label: str,
    max_tokens: int,
    floor_tokens: int | None = None,
    ceilings_tokens: Mapping[float, int] | None = None,
    ceilings_note: str | None = None,
) -> ProfileInput:
    """The profile section drawn from a step-time model alone (no measurement to show): its
    prefill-only iteration time against tokens and its ridge, labelled as model output."""
    tokens = np.geomspace(64, max_tokens, 40)
    times_ms = np.array([model.iteration_time_s([(int(p), 0)], []) * 1e3 for p in tokens])
    return ProfileInput(
        curves=(ProfileCurve(label=label, tokens=tokens, median_ms=times_ms, measured=False),),
        ridge_tokens=prefill_knee_tokens(model),
        knee_note="This curve is model output from presets, not a measurement; run `budgettune "
        "profile` on the target hardware and sweep with --profile for a measured one.",
        floor_tokens=floor_tokens,
        ceilings_tokens=dict(ceilings_tokens or {}),
        ceilings_note=ceilings_note,
    )
