"""Plotly figure builders for the report: profile curve, latency/throughput/failures against
budget, latency CDFs. Each returns a :class:`Chart`: the figure plus a caption saying what to look
for, computed from the data. Workload and timeline charts live in :mod:`.charts_run`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from budgettune.report.inputs import BudgetPoint, Cdf, Percentiles, ProfileInput, SweepInput

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


def _layout(fig: go.Figure, *, x_title: str, y_title: str, height: int = 420) -> None:
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


def _round(values: Sequence[float | None] | np.ndarray, digits: int = 4) -> list[float | None]:
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


def fmt_ms(value_ms: float | None) -> str:
    """31.2 -> '31.2 ms', 1530 -> '1.53 s', inf -> 'inf (failures)'."""
    if value_ms is None or math.isnan(value_ms):
        return "-"
    if math.isinf(value_ms):
        return "inf (failures)"
    if value_ms >= 1000:
        return f"{value_ms / 1000:.3g} s"
    return f"{value_ms:.3g} ms"


def budget_colors(budgets: Sequence[int | None]) -> dict[int | None, str]:
    """A colour per budget, dark for small budgets to light for large; ``none`` in grey."""
    numeric = sorted({b for b in budgets if b is not None})
    colors: dict[int | None, str] = {None: NEUTRAL_COLOR}
    if numeric:
        spots = [0.85 * i / max(1, len(numeric) - 1) for i in range(len(numeric))]
        colors.update(zip(numeric, sample_colorscale("Viridis", spots), strict=True))
    return colors


def _budget_axis(fig: go.Figure, budgets: Sequence[int], *, row: int | None = None) -> None:
    """Log-2 spaced budget axis ticked at the budgets themselves."""
    kwargs = {} if row is None else {"row": row, "col": 1}
    ticks = sorted(set(budgets))
    if len(ticks) > 12:  # keep labels readable: every other tick
        ticks = ticks[::2]
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks], **kwargs)


def _vline(fig: go.Figure, x: float, text: str, color: str, dash: str = "dot") -> None:
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
        text=text,
        showarrow=False,
        font={"color": color, "size": 11},
    )


def _hline(fig: go.Figure, y: float, text: str, color: str, dash: str = "dash") -> None:
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
        x=1.0,
        xref="paper",
        xanchor="right",
        y=math.log10(y) if fig.layout.yaxis.type == "log" else y,
        yref="y",
        yanchor="bottom",
        text=text,
        showarrow=False,
        font={"color": color, "size": 11},
    )


def _pct_name(percentile: float) -> str:
    return f"p{percentile:g}"


# ---------------------------------------------------------------------------------------------
# Profile


def profile_chart(profile: ProfileInput) -> Chart:
    """Iteration time against prompt tokens: measured medians with their spread, the fitted
    two-segment curve, P* with its confidence band, floor and ceilings, tile probes."""
    fig = go.Figure()
    for index, curve in enumerate(profile.curves):
        color = MEASURED_COLOR if index == 0 else PREDICTED_COLOR
        if index > 1:
            color = sample_colorscale("Viridis", [min(0.9, 0.2 * index)])[0]
        kind = "measured" if curve.measured else "model output"
        if curve.lo_ms is not None and curve.hi_ms is not None:
            fig.add_trace(
                go.Scatter(
                    x=_round(curve.tokens),
                    y=_round(curve.hi_ms),
                    mode="lines",
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=_round(curve.tokens),
                    y=_round(curve.lo_ms),
                    mode="lines",
                    line={"width": 0},
                    fill="tonexty",
                    fillcolor="rgba(9,105,218,0.15)" if index == 0 else "rgba(130,80,223,0.15)",
                    name=f"{curve.label}: spread over repeats",
                    hoverinfo="skip",
                )
            )
        fig.add_trace(
            go.Scatter(
                x=_round(curve.tokens),
                y=_round(curve.median_ms),
                mode="markers" if curve.measured else "lines+markers",
                marker={"color": color, "size": 7},
                name=f"{curve.label} ({kind})",
                hovertemplate="%{x:.0f} tokens: %{y:.3g} ms<extra></extra>",
            )
        )
        if curve.fit_tokens is not None and curve.fit_ms is not None:
            fig.add_trace(
                go.Scatter(
                    x=_round(curve.fit_tokens),
                    y=_round(curve.fit_ms),
                    mode="lines",
                    line={"color": color, "dash": "dash", "width": 2},
                    name=f"{curve.label}: fitted two-segment curve",
                    hovertemplate="fit: %{x:.0f} tokens, %{y:.3g} ms<extra></extra>",
                )
            )
    if profile.tile_probes:
        fig.add_trace(
            go.Scatter(
                x=[p.round_tokens + 1 for p in profile.tile_probes],
                y=_round([p.plus_one_ms for p in profile.tile_probes]),
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
    _layout(
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
        _vline(fig, profile.ridge_tokens, f"P* ≈ {profile.ridge_tokens:.0f}", "#9a6700", "solid")
    if profile.floor_tokens is not None:
        _vline(fig, profile.floor_tokens, f"floor {profile.floor_tokens}", PASS_COLOR)
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


# ---------------------------------------------------------------------------------------------
# Sweep: latency, throughput, CDFs, failures against budget


def _value(summary: Percentiles | None, percentile: float) -> float | None:
    return None if summary is None else summary.at(percentile)


def _budget_marks(fig: go.Figure, sweep: SweepInput) -> None:
    interval = sweep.feasible_interval()
    if interval is not None:
        low, high = interval
        fig.add_vrect(
            x0=low / 1.1,
            x1=high * 1.1,
            fillcolor=FEASIBLE_FILL,
            line_width=0,
            layer="below",
        )
    if sweep.recommended_budget is not None:
        _vline(
            fig,
            sweep.recommended_budget,
            f"recommended {sweep.recommended_budget}",
            PASS_COLOR,
            "solid",
        )
    default = sweep.engine_default_budget
    if default is not None and default != sweep.recommended_budget:
        _vline(fig, default, f"engine default {default}", NEUTRAL_COLOR)


def _engine_failures(fig: go.Figure, points: list[BudgetPoint]) -> None:
    """Mark budgets whose engine failed to start or crashed at the bottom of the chart."""
    for point in points:
        if point.error and point.budget_tokens:
            fig.add_annotation(
                x=math.log10(point.budget_tokens),
                xref="x",
                y=0,
                yref="paper",
                yanchor="bottom",
                text="✕ engine failed",
                showarrow=False,
                font={"color": FAIL_COLOR, "size": 11},
                hovertext=point.error[:200],
            )


def latency_vs_budget_chart(sweep: SweepInput, metric: str) -> Chart:
    """p99 TBT (``metric="tbt"``) or TTFT (``"ttft"``) against budget, measured and predicted,
    with the SLO line, the feasible interval shaded and the recommended budget marked."""
    pct = sweep.percentile
    name = {"tbt": "TBT", "ttft": "TTFT"}[metric]
    slo = sweep.slo_tbt_ms if metric == "tbt" else sweep.slo_ttft_ms
    points = sweep.numeric_points()
    budgets = [p.budget_tokens or 0 for p in points]

    def series(kind: str) -> list[float | None]:
        attr = f"{kind}_{metric}"
        return [_value(getattr(p, attr), pct) for p in points]

    measured, predicted = series("measured"), series("predicted")
    finite = [v for v in measured + predicted if v is not None and math.isfinite(v)]
    if slo is not None:
        finite.append(slo)
    top = max(finite) * 1.6 if finite else 1.0
    fig = go.Figure()
    if any(v is not None for v in predicted):
        fig.add_trace(
            go.Scatter(
                x=budgets,
                y=_round([v if v is not None else math.nan for v in predicted]),
                mode="lines+markers",
                line={"color": PREDICTED_COLOR, "dash": "dash"},
                connectgaps=True,
                marker={"symbol": "circle-open", "size": 8},
                name=f"{_pct_name(pct)} {name} predicted (simulator)",
                hovertemplate="budget %{x}: %{y:.3g} ms predicted<extra></extra>",
            )
        )
    if any(v is not None for v in measured):
        shown = [math.nan if v is None else (top if math.isinf(v) else v) for v in measured]
        colors = [
            NEUTRAL_COLOR if p.passed is None else (PASS_COLOR if p.passed else FAIL_COLOR)
            for p in points
        ]
        fig.add_trace(
            go.Scatter(
                x=budgets,
                y=_round(shown),
                mode="lines+markers",
                connectgaps=True,
                line={"color": MEASURED_COLOR},
                marker={
                    "size": 10,
                    "color": colors,
                    "symbol": [
                        "triangle-up" if v is not None and math.isinf(v) else "circle"
                        for v in measured
                    ],
                },
                name=f"{_pct_name(pct)} {name} measured (green pass, red fail)",
                text=[fmt_ms(v) for v in measured],
                hovertemplate="budget %{x}: %{text} measured<extra></extra>",
            )
        )
    _layout(fig, x_title="token budget (tokens, log)", y_title=f"{_pct_name(pct)} {name} (ms)")
    if budgets:
        _budget_axis(fig, budgets + [b for b in (sweep.engine_default_budget,) if b])
    spread = max(finite) / max(min(finite), 1e-9) if finite else 1.0
    if spread > 30:
        fig.update_yaxes(type="log", title_text=f"{_pct_name(pct)} {name} (ms, log)")
    else:
        fig.update_yaxes(rangemode="tozero")
    if slo is not None:
        _hline(fig, slo, f"{name} SLO {fmt_ms(slo)}", SLO_COLOR)
    none_point = next((p for p in sweep.points if p.budget_tokens is None), None)
    none_value = (
        _value(
            none_point.measured_ttft
            if none_point and metric == "ttft"
            else (none_point.measured_tbt if none_point else None),
            pct,
        )
        if none_point
        else None
    )
    if none_point is not None and none_value is None:
        none_value = _value(
            none_point.predicted_ttft if metric == "ttft" else none_point.predicted_tbt, pct
        )
    if none_value is not None and math.isfinite(none_value):
        _hline(fig, none_value, f"no chunking: {fmt_ms(none_value)}", NEUTRAL_COLOR, "dot")
    _budget_marks(fig, sweep)
    _engine_failures(fig, points)
    chart_id = f"chart-{metric}-vs-budget"
    return Chart(
        chart_id,
        f"{_pct_name(pct)} {name} against budget",
        fig,
        _latency_caption(sweep, metric, points, measured, predicted, slo),
    )


def slo_crossing(
    budgets: Sequence[int], values: Sequence[float | None], slo: float
) -> float | None:
    """The budget where the piecewise-linear curve through (budget, value) first crosses ``slo``
    going up (TBT) or down (TTFT), interpolated in log budget; None when it never crosses."""
    pairs = [(b, v) for b, v in zip(budgets, values, strict=True) if v is not None]
    for (b0, v0), (b1, v1) in itertools.pairwise(pairs):
        if (v0 - slo) * (v1 - slo) <= 0 and v0 != v1:
            if math.isinf(v0) or math.isinf(v1):
                return float(b1 if math.isinf(v0) else b0)
            frac = (slo - v0) / (v1 - v0)
            return float(math.exp(math.log(b0) + frac * (math.log(b1) - math.log(b0))))
    return None


def _latency_caption(
    sweep: SweepInput,
    metric: str,
    points: list[BudgetPoint],
    measured: list[float | None],
    predicted: list[float | None],
    slo: float | None,
) -> str:
    pct = _pct_name(sweep.percentile)
    budgets = [p.budget_tokens or 0 for p in points]
    values = measured if any(v is not None for v in measured) else predicted
    if metric == "tbt":
        text = (
            f"{pct} TBT rises with the budget: a bigger budget puts more prompt tokens into each "
            "iteration beside the running decodes."
        )
    else:
        text = (
            f"{pct} TTFT falls as the budget grows: a prompt needs fewer iterations to be "
            "prefilled. A sharp rise at small budgets means the budget is below the ridge or "
            "requests queue."
        )
    if slo is not None and values:
        crossing = slo_crossing(budgets, values, slo)
        if crossing is not None:
            text += f" The SLO line ({fmt_ms(slo)}) is crossed near {crossing:.0f} tokens."
        elif all(v is not None and v <= slo for v in values):
            text += f" Every budget shown meets the SLO ({fmt_ms(slo)})."
        elif all(v is None or v > slo for v in values):
            text += f" No budget shown meets the SLO ({fmt_ms(slo)})."
    pairs = [
        (m, p)
        for m, p in zip(measured, predicted, strict=True)
        if m is not None and p is not None and math.isfinite(m) and math.isfinite(p) and m > 0
    ]
    if pairs:
        errors = sorted(abs(p / m - 1) for m, p in pairs)
        text += (
            f" Prediction against measurement: median error {100 * errors[len(errors) // 2]:.0f}%, "
            f"max {100 * errors[-1]:.0f}%."
        )
    return text


def throughput_chart(sweep: SweepInput) -> Chart:
    """Output throughput (tokens/s) against budget, and goodput (requests/s) when measured."""
    points = sweep.numeric_points()
    budgets = [p.budget_tokens or 0 for p in points]
    fig = go.Figure()
    measured = [p.throughput_tokens_per_s for p in points]
    predicted = [p.predicted_throughput_tokens_per_s for p in points]
    if any(v is not None for v in predicted):
        fig.add_trace(
            go.Scatter(
                x=budgets,
                y=_round([math.nan if v is None else v for v in predicted]),
                mode="lines+markers",
                line={"color": PREDICTED_COLOR, "dash": "dash"},
                marker={"symbol": "circle-open"},
                name="throughput predicted (tokens/s)",
            )
        )
    if any(v is not None for v in measured):
        fig.add_trace(
            go.Scatter(
                x=budgets,
                y=_round([math.nan if v is None else v for v in measured]),
                mode="lines+markers",
                line={"color": MEASURED_COLOR},
                name="throughput measured (tokens/s)",
            )
        )
    goodput = [p.goodput_per_s for p in points]
    has_goodput = any(v is not None for v in goodput)
    if has_goodput:
        fig.add_trace(
            go.Bar(
                x=budgets,
                y=_round([math.nan if v is None else v for v in goodput]),
                name="goodput (requests/s, right axis)",
                marker={"color": "rgba(26,127,55,0.35)"},
                yaxis="y2",
                width=[b * 0.25 for b in budgets],
            )
        )
    _layout(fig, x_title="token budget (tokens, log)", y_title="output throughput (tokens/s)")
    fig.update_layout(yaxis={"rangemode": "tozero"})
    if has_goodput:
        fig.update_layout(
            yaxis2={
                "title": {"text": "goodput (requests/s)"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
                "showgrid": False,
            }
        )
    if budgets:
        _budget_axis(fig, budgets)
    _budget_marks(fig, sweep)
    values = measured if any(v is not None for v in measured) else predicted
    known = [(b, v) for b, v in zip(budgets, values, strict=True) if v is not None]
    caption = (
        "At a fixed arrival rate throughput follows the load and barely moves with the budget; "
        "a drop at small budgets means iterations below the ridge cannot keep up."
    )
    if known:
        low = min(known, key=lambda bv: bv[1])
        high = max(known, key=lambda bv: bv[1])
        caption += (
            f" Here it ranges from {low[1]:,.0f} tokens/s (budget {low[0]}) to "
            f"{high[1]:,.0f} tokens/s (budget {high[0]})."
        )
    if has_goodput:
        caption += (
            " Goodput is the highest arrival rate at which both SLOs still hold: "
            "its peak marks the budget that carries the most traffic."
        )
    return Chart("chart-throughput", "Throughput and goodput against budget", fig, caption)


def cdf_chart(sweep: SweepInput, metric: str) -> Chart | None:
    """The CDF of TBT or TTFT samples, one line per budget, log x axis; None without samples."""
    name = {"tbt": "TBT", "ttft": "TTFT"}[metric]
    slo = sweep.slo_tbt_ms if metric == "tbt" else sweep.slo_ttft_ms
    with_cdf: list[tuple[BudgetPoint, Cdf]] = []
    for point in sorted(
        sweep.points, key=lambda p: (p.budget_tokens is None, p.budget_tokens or 0)
    ):
        cdf = point.tbt_cdf if metric == "tbt" else point.ttft_cdf
        if cdf is not None and len(cdf.values_ms):
            with_cdf.append((point, cdf))
    if not with_cdf:
        return None
    colors = budget_colors([p.budget_tokens for p, _ in with_cdf])
    fig = go.Figure()
    for point, cdf in with_cdf:
        fig.add_trace(
            go.Scatter(
                x=_round(np.maximum(cdf.values_ms, 1e-3)),
                y=_round(cdf.fraction, 5),
                mode="lines",
                line={"color": colors[point.budget_tokens], "width": 2, "shape": "hv"},
                name=f"budget {point.label}",
                hovertemplate=f"budget {point.label}: %{{x:.3g}} ms at %{{y:.4f}}<extra></extra>",
            )
        )
    _layout(fig, x_title=f"{name} (ms, log)", y_title="fraction of samples")
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[0, 1.02])
    _hline(fig, sweep.percentile / 100, _pct_name(sweep.percentile), NEUTRAL_COLOR, "dot")
    if slo is not None:
        _vline(fig, slo, f"SLO {fmt_ms(slo)}", SLO_COLOR, "dash")
    unit = "gap between two tokens of one request" if metric == "tbt" else "request"
    caption = (
        f"Each line is one budget; one sample per {unit}. Where a line crosses the dotted "
        f"{_pct_name(sweep.percentile)} level left of the red SLO line, the budget meets the SLO. "
    )
    caption += (
        "Larger budgets shift the TBT tail right: long prompts slow the decodes beside them."
        if metric == "tbt"
        else "Small budgets stretch the TTFT tail: a long prompt needs many iterations; "
        "a step in a curve (two populations) hints at head-of-line blocking among prefills."
    )
    return Chart(f"chart-{metric}-cdf", f"{name} distribution per budget", fig, caption)


def failures_chart(sweep: SweepInput) -> Chart:
    """Failed requests per budget, stacked by reason; budgets whose engine failed are marked."""
    points = sorted(sweep.points, key=lambda p: (p.budget_tokens is None, p.budget_tokens or 0))
    labels = [p.label for p in points]
    reasons = sorted({r for p in points for r in p.failure_reasons})
    fig = go.Figure()
    palette = sample_colorscale(
        "Reds", [0.4 + 0.5 * i / max(1, len(reasons)) for i in range(len(reasons))]
    )
    for reason, color in zip(reasons, palette, strict=True):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=[p.failure_reasons.get(reason, 0) for p in points],
                name=reason[:60],
                marker={"color": color},
            )
        )
    unexplained = [max(0, (p.failed or 0) - sum(p.failure_reasons.values())) for p in points]
    if any(unexplained) or not reasons:
        fig.add_trace(
            go.Bar(x=labels, y=unexplained, name="failed requests", marker={"color": FAIL_COLOR})
        )
    crashed = [p for p in points if p.error]
    if crashed:
        fig.add_trace(
            go.Scatter(
                x=[p.label for p in crashed],
                y=[0] * len(crashed),
                mode="markers+text",
                marker={"symbol": "x", "size": 14, "color": "black"},
                text=["engine failed"] * len(crashed),
                textposition="top center",
                hovertext=[(p.error or "")[:200] for p in crashed],
                hoverinfo="text",
                name="engine failed to start or crashed",
            )
        )
    _layout(fig, x_title="token budget (tokens)", y_title="failed requests (count)", height=340)
    fig.update_layout(barmode="stack")
    fig.update_xaxes(type="category")
    fig.update_yaxes(rangemode="tozero")
    total = sum(p.failed or 0 for p in points)
    if total == 0 and not crashed:
        caption = (
            "No request failed at any budget. Failures (HTTP errors, timeouts, short outputs) "
            "would count as SLO violations, never dropped from the percentiles."
        )
    else:
        caption = (
            f"{total} request(s) failed in total; every failure counts as an SLO violation "
            "(its TTFT is infinite). Failures concentrated at one budget point to the engine, "
            "not the load."
        )
        if crashed:
            caption += " Budgets marked x: the engine failed to start or crashed (hover for why)."
    return Chart("chart-failures", "Failures per budget", fig, caption)
