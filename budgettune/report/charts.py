"""Plotly figure building blocks for the report (style, reference lines, number rounding) and the
profile chart. Each builder returns a :class:`Chart`: the figure plus a caption saying what to look
for, computed from the data. Budget charts live in :mod:`.charts_sweep`, workload and timeline
charts in :mod:`.charts_run`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from budgettune.report.inputs import ProfileCurve, ProfileInput

PASS_COLOR = "#1a7f37"
FAIL_COLOR = "#cf222e"
MEASURED_COLOR = "#0969da"
PREDICTED_COLOR = "#8250df"
SLO_COLOR = "#cf222e"
NEUTRAL_COLOR = "#57606a"
FEASIBLE_FILL = "rgba(26,127,55,0.10)"
TEMPLATE = "plotly_white"


@dataclass(slots=True, frozen=True)
class Chart:
    """One figure of the page: ``chart_id`` is the HTML id of its div; ``caption`` is plain text
    (escaped by the page), saying what to look for."""

    chart_id: str
    title: str
    figure: go.Figure
    caption: str


def style_layout(fig: go.Figure, *, x_title: str, y_title: str, height: int = 420) -> None:
    fig.update_layout(
        template=TEMPLATE,
        height=height,
        margin={"l": 70, "r": 30, "t": 40, "b": 60},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        showlegend=True,
        hovermode="closest",
    )
    fig.update_xaxes(title_text=x_title)
    fig.update_yaxes(title_text=y_title)


def round_sig(values: Sequence[float | None] | np.ndarray, digits: int = 4) -> list[float | None]:
    """Keep ``digits`` significant digits (smaller page); non-finite values become gaps."""
    out: list[float | None] = []
    data = [math.nan if v is None else v for v in values]
    for value in np.asarray(data, dtype=np.float64).tolist():
        if not math.isfinite(value):
            out.append(None)
        elif value == 0:
            out.append(0.0)
        else:
            out.append(float(f"{value:.{digits}g}"))
    return out


def budget_colors(budgets: Sequence[int | None]) -> dict[int | None, str]:
    """A colour per budget, dark for small budgets to light for large; ``none`` in grey."""
    numeric = sorted({b for b in budgets if b is not None})
    colors: dict[int | None, str] = {None: NEUTRAL_COLOR}
    if numeric:
        spots = [0.85 * i / max(1, len(numeric) - 1) for i in range(len(numeric))]
        colors.update(zip(numeric, sample_colorscale("Viridis", spots), strict=True))
    return colors


def budget_axis(fig: go.Figure, budgets: Sequence[int], *, row: int | None = None) -> None:
    """Log-2 spaced budget axis ticked at the budgets themselves."""
    kwargs = {} if row is None else {"row": row, "col": 1}
    ticks = sorted(set(budgets))
    if len(ticks) > 12:  # keep labels readable: every other tick
        ticks = ticks[::2]
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks], **kwargs)


def vline(
    fig: go.Figure, x: float, text: str, color: str, dash: str = "dot", *, level: int = 0
) -> None:
    """A vertical reference line across the plot, labelled on top; ``level`` 1 puts the label
    one line lower, so two lines close together keep readable labels."""
    fig.add_shape(
        type="line",
        xref="x",
        yref="paper",
        x0=x,
        x1=x,
        y0=0,
        y1=1,
        line={"color": color, "width": 1.5, "dash": dash},
    )
    fig.add_annotation(
        x=math.log10(x) if fig.layout.xaxis.type == "log" else x,
        xref="x",
        yref="paper",
        y=1.0,
        yanchor="bottom",
        yshift=-15 * level,
        text=text,
        showarrow=False,
        font={"color": color, "size": 11},
    )


def hline(fig: go.Figure, y: float, text: str, color: str, dash: str = "dash") -> None:
    fig.add_shape(
        type="line",
        xref="paper",
        yref="y",
        x0=0,
        x1=1,
        y0=y,
        y1=y,
        line={"color": color, "width": 1.5, "dash": dash},
    )
    fig.add_annotation(
        x=0.0,
        xref="paper",
        xanchor="left",
        y=math.log10(y) if fig.layout.yaxis.type == "log" else y,
        yref="y",
        yanchor="bottom",
        text=text,
        showarrow=False,
        font={"color": color, "size": 11},
    )


def pct_name(percentile: float) -> str:
    return f"p{percentile:g}"


# ---------------------------------------------------------------------------------------------
# Profile


def profile_chart(profile: ProfileInput) -> Chart:
    """Iteration time against prompt tokens: measured medians with their spread, the fitted
    two-segment curve, P* with its confidence band, floor and ceilings, tile probes."""
    fig = go.Figure()
    for index, curve in enumerate(profile.curves):
        for trace in _curve_traces(curve, index):
            fig.add_trace(trace)
    if profile.tile_probes:
        fig.add_trace(
            go.Scatter(
                x=[p.round_tokens + 1 for p in profile.tile_probes],
                y=round_sig([p.plus_one_ms for p in profile.tile_probes]),
                mode="markers",
                marker={"symbol": "diamond-open", "size": 11, "color": FAIL_COLOR},
                name="tile probes (round size + 1 token)",
                text=[
                    f"{p.round_tokens + 1} vs {p.round_tokens}: "
                    f"{100 * (p.plus_one_ms / p.round_ms - 1):+.1f}%"
                    for p in profile.tile_probes
                ],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    style_layout(
        fig,
        x_title="prompt tokens in the iteration (tokens, log)",
        y_title="iteration time (ms, log)",
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    if profile.ridge_tokens is not None:
        if profile.ridge_ci_tokens is not None:
            low, high = profile.ridge_ci_tokens
            fig.add_vrect(x0=low, x1=high, fillcolor="rgba(191,135,0,0.15)", line_width=0)
        vline(fig, profile.ridge_tokens, f"P* ≈ {profile.ridge_tokens:.0f}", "#9a6700", "solid")
    if profile.floor_tokens is not None:
        vline(fig, profile.floor_tokens, f"floor {profile.floor_tokens}", PASS_COLOR, level=1)
    if profile.ceilings_tokens:
        targets = sorted(profile.ceilings_tokens)
        fig.add_trace(
            go.Scatter(
                x=[profile.ceilings_tokens[t] for t in targets],
                y=targets,
                mode="markers+text",
                marker={"symbol": "x", "size": 10, "color": SLO_COLOR},
                text=[f"{t:g} ms at {profile.ceilings_tokens[t]}" for t in targets],
                textposition="top left",
                name="budget reaching a TBT target (ceiling)",
                hovertemplate="%{text}<extra></extra>",
            )
        )
    return Chart("chart-profile", "Iteration time against tokens", fig, _profile_caption(profile))


def _curve_traces(curve: ProfileCurve, index: int) -> list[go.Scatter]:
    """One profile curve: its spread over repeats (shaded), its medians and its fitted curve."""
    traces: list[go.Scatter] = []
    color = MEASURED_COLOR if index == 0 else PREDICTED_COLOR
    if index > 1:
        color = sample_colorscale("Viridis", [min(0.9, 0.2 * index)])[0]
    kind = "measured" if curve.measured else "model output"
    if curve.lo_ms is not None and curve.hi_ms is not None:
        traces.append(
            go.Scatter(
                x=round_sig(curve.tokens),
                y=round_sig(curve.hi_ms),
                mode="lines",
                line={"width": 0},
                hoverinfo="skip",
                showlegend=False,
            )
        )
        traces.append(
            go.Scatter(
                x=round_sig(curve.tokens),
                y=round_sig(curve.lo_ms),
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor="rgba(9,105,218,0.15)" if index == 0 else "rgba(130,80,223,0.15)",
                name=f"{curve.label}: spread over repeats",
                hoverinfo="skip",
            )
        )
    traces.append(
        go.Scatter(
            x=round_sig(curve.tokens),
            y=round_sig(curve.median_ms),
            mode="markers" if curve.measured else "lines+markers",
            marker={"color": color, "size": 7},
            name=f"{curve.label} ({kind})",
            hovertemplate="%{x:.0f} tokens: %{y:.3g} ms<extra></extra>",
        )
    )
    if curve.fit_tokens is not None and curve.fit_ms is not None:
        traces.append(
            go.Scatter(
                x=round_sig(curve.fit_tokens),
                y=round_sig(curve.fit_ms),
                mode="lines",
                line={"color": color, "dash": "dash", "width": 2},
                name=f"{curve.label}: fitted two-segment curve",
                hovertemplate="fit: %{x:.0f} tokens, %{y:.3g} ms<extra></extra>",
            )
        )
    return traces


def _profile_caption(profile: ProfileInput) -> str:
    parts: list[str] = []
    if profile.ridge_tokens is not None:
        ci = ""
        if profile.ridge_ci_tokens is not None:
            ci = f" (95% CI {profile.ridge_ci_tokens[0]:.0f}-{profile.ridge_ci_tokens[1]:.0f})"
        parts.append(
            f"Time stays nearly flat up to the ridge P* ≈ {profile.ridge_tokens:.0f} tokens{ci} "
            "and grows linearly above it: a prefill share of the budget below P* pays a full "
            "weight read for too little work."
        )
    if profile.knee_note:
        parts.append(profile.knee_note)
    if profile.floor_tokens is not None:
        parts.append(f"The budget floor is {profile.floor_tokens} tokens (P* plus the decodes).")
    if profile.ceilings_tokens:
        marks = ", ".join(f"{t:g} ms at {b}" for t, b in sorted(profile.ceilings_tokens.items()))
        beside = f" ({profile.ceilings_note})" if profile.ceilings_note else ""
        parts.append(f"One iteration{beside} reaches the TBT targets at: {marks} tokens.")
    if profile.tile_probes:
        worst = max(profile.tile_probes, key=lambda p: p.plus_one_ms / p.round_ms)
        jump = 100 * (worst.plus_one_ms / worst.round_ms - 1)
        parts.append(
            f"Tile probes: {worst.round_tokens + 1} tokens take {jump:+.1f}% against "
            f"{worst.round_tokens}; a jump means the budget should stay a multiple of 128 or 256."
        )
    for series, text in profile.fit_errors.items():
        parts.append(f"Fit error, {series}: {text}.")
    return " ".join(parts) or "Look for the knee where time starts growing linearly."
