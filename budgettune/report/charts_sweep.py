"""Charts against the token budget: p99 TBT and TTFT (measured and predicted, SLO lines, feasible
interval, recommendation), throughput and goodput, latency CDFs per budget, failures per budget.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from budgettune.core.units import format_ms
from budgettune.report.charts import (
    FAIL_COLOR,
    FEASIBLE_FILL,
    MEASURED_COLOR,
    NEUTRAL_COLOR,
    PASS_COLOR,
    PREDICTED_COLOR,
    SLO_COLOR,
    Chart,
    budget_axis,
    budget_colors,
    hline,
    pct_name,
    round_sig,
    style_layout,
    vline,
)
from budgettune.report.inputs import BudgetPoint, Cdf, Percentiles, SweepInput

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
        vline(
            fig,
            sweep.recommended_budget,
            f"recommended {sweep.recommended_budget}",
            PASS_COLOR,
            "solid",
        )
    default = sweep.engine_default_budget
    if default is not None and default != sweep.recommended_budget:
        vline(fig, default, f"engine default {default}", NEUTRAL_COLOR, level=1)


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
    label = f"{pct_name(pct)} {name}"
    if any(v is not None for v in predicted):
        fig.add_trace(_predicted_trace(budgets, predicted, label))
    if any(v is not None for v in measured):
        fig.add_trace(_measured_trace(points, budgets, measured, metric, top, label))
    style_layout(fig, x_title="token budget (tokens, log)", y_title=f"{label} (ms)")
    if budgets:
        budget_axis(fig, budgets + [b for b in (sweep.engine_default_budget,) if b])
    spread = max(finite) / max(min(finite), 1e-9) if finite else 1.0
    if spread > 30:
        fig.update_yaxes(type="log", title_text=f"{label} (ms, log)")
    else:
        fig.update_yaxes(rangemode="tozero")
    if slo is not None:
        hline(fig, slo, f"{name} SLO {format_ms(slo)}", SLO_COLOR)
    none_value = _no_chunking_value(sweep, metric)
    if none_value is not None and math.isfinite(none_value):
        hline(fig, none_value, f"no chunking: {format_ms(none_value)}", NEUTRAL_COLOR, "dot")
    _budget_marks(fig, sweep)
    _engine_failures(fig, points)
    chart_id = f"chart-{metric}-vs-budget"
    return Chart(
        chart_id,
        f"{label} against budget",
        fig,
        _latency_caption(sweep, metric, points, measured, predicted, slo),
    )


def _predicted_trace(budgets: list[int], predicted: list[float | None], label: str) -> go.Scatter:
    """The simulator's figure at each budget, dashed."""
    return go.Scatter(
        x=budgets,
        y=round_sig([v if v is not None else math.nan for v in predicted]),
        mode="lines+markers",
        line={"color": PREDICTED_COLOR, "dash": "dash"},
        connectgaps=True,
        marker={"symbol": "circle-open", "size": 8},
        name=f"{label} predicted (simulator)",
        hovertemplate="budget %{x}: %{y:.3g} ms predicted<extra></extra>",
    )


def _measured_trace(
    points: Sequence[BudgetPoint],
    budgets: list[int],
    measured: list[float | None],
    metric: str,
    top: float,
    label: str,
) -> go.Scatter:
    """The measured figure at each budget with its 95% interval: green pass, red fail, hollow
    marginal, a triangle at the top for an infinite p99 (failed requests)."""
    shown = [math.nan if v is None else (top if math.isinf(v) else v) for v in measured]
    colors = [
        NEUTRAL_COLOR if p.passed is None else (PASS_COLOR if p.passed else FAIL_COLOR)
        for p in points
    ]
    intervals = [p.tbt_interval_ms if metric == "tbt" else p.ttft_interval_ms for p in points]
    above, below = _error_bars(shown, intervals, top)
    marginal = [p.confidence == "marginal" for p in points]
    return go.Scatter(
        x=budgets,
        y=round_sig(shown),
        mode="lines+markers",
        connectgaps=True,
        line={"color": MEASURED_COLOR},
        error_y={
            "type": "data",
            "symmetric": False,
            "array": above,
            "arrayminus": below,
            "color": MEASURED_COLOR,
            "thickness": 1.2,
            "width": 5,
        },
        marker={
            "size": 10,
            "color": colors,
            "symbol": [
                "triangle-up"
                if v is not None and math.isinf(v)
                else ("circle-open" if m else "circle")
                for v, m in zip(measured, marginal, strict=True)
            ],
            "line": {"width": 2, "color": colors},
        },
        name=f"{label} measured, 95% interval (green pass, red fail; hollow: marginal)",
        text=[
            _measured_text(v, interval, p)
            for v, interval, p in zip(measured, intervals, points, strict=True)
        ],
        hovertemplate="budget %{x}: %{text}<extra></extra>",
    )


def _no_chunking_value(sweep: SweepInput, metric: str) -> float | None:
    """The figure of the point without chunking (budget None), measured, else predicted."""
    none_point = next((p for p in sweep.points if p.budget_tokens is None), None)
    if none_point is None:
        return None
    pct = sweep.percentile
    measured = none_point.measured_ttft if metric == "ttft" else none_point.measured_tbt
    value = _value(measured, pct)
    if value is None:
        predicted = none_point.predicted_ttft if metric == "ttft" else none_point.predicted_tbt
        value = _value(predicted, pct)
    return value


def _error_bars(
    shown: list[float],
    intervals: list[tuple[float | None, float | None] | None],
    top: float,
) -> tuple[list[float | None], list[float | None]]:
    """Plotly's asymmetric error bars (above, below the marker) from each point's 95% interval;
    an open upper end reaches the top of the chart, a point without one gets none."""
    above, below = [], []
    for value, interval in zip(shown, intervals, strict=True):
        if interval is None or not math.isfinite(value):
            above.append(0.0)
            below.append(0.0)
            continue
        low, high = interval
        above.append(max(0.0, (top if high is None else high) - value))
        below.append(max(0.0, value - (value if low is None else low)))
    return round_sig(above), round_sig(below)


def _measured_text(
    value: float | None, interval: tuple[float | None, float | None] | None, point: BudgetPoint
) -> str:
    """The hover text of a measured marker: its figure, interval, confidence and replays."""
    text = f"{format_ms(value)} measured"
    if interval is not None:
        low, high = interval
        text += f", 95% interval {format_ms(low)} to " + (
            "unbounded" if high is None else format_ms(high)
        )
    if point.confidence is not None:
        text += f" ({point.confidence}"
        text += f", {point.replays} replays)" if point.replays > 1 else ")"
    return text


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
    pct = pct_name(sweep.percentile)
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
            text += f" The SLO line ({format_ms(slo)}) is crossed near {crossing:.0f} tokens."
        elif all(v is not None and v <= slo for v in values):
            text += f" Every budget shown meets the SLO ({format_ms(slo)})."
        elif all(v is None or v > slo for v in values):
            text += f" No budget shown meets the SLO ({format_ms(slo)})."
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
                y=round_sig([math.nan if v is None else v for v in predicted]),
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
                y=round_sig([math.nan if v is None else v for v in measured]),
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
                y=round_sig([math.nan if v is None else v for v in goodput]),
                name="goodput (requests/s, right axis)",
                marker={"color": "rgba(26,127,55,0.35)"},
                yaxis="y2",
                width=[b * 0.25 for b in budgets],
            )
        )
    style_layout(fig, x_title="token budget (tokens, log)", y_title="output throughput (tokens/s)")
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
        budget_axis(fig, budgets)
    _budget_marks(fig, sweep)
    values = measured if any(v is not None for v in measured) else predicted
    known = [(b, v) for b, v in zip(budgets, values, strict=True) if v is not None]
    title = "Throughput and goodput against budget" if has_goodput else "Throughput against budget"
    return Chart("chart-throughput", title, fig, _throughput_caption(known, has_goodput))


def _throughput_caption(known: list[tuple[int, float]], has_goodput: bool) -> str:
    """What the throughput chart shows, with its range over the budgets ``known``."""
    caption = (
        "At a fixed arrival rate throughput follows the load and barely moves with the budget; "
        "a drop at small budgets means iterations below the ridge cannot keep up."
    )
    if len(known) == 1:
        caption += f" Measured: {known[0][1]:,.0f} tokens/s at budget {known[0][0]}."
    elif known:
        low = min(known, key=lambda bv: bv[1])
        high = max(known, key=lambda bv: bv[1])
        caption += (
            f" Here it ranges from {low[1]:,.0f} tokens/s (budget {low[0]}) to "
            f"{high[1]:,.0f} tokens/s (budget {high[0]})."
        )
    if has_goodput:
        return caption + (
            " Goodput is the highest arrival rate at which both SLOs still hold: "
            "its peak marks the budget that carries the most traffic."
        )
    return caption + (
        " Goodput (the highest rate meeting both SLOs) was not searched: run with --goodput"
        " to add it."
    )


def survival(cdf: Cdf) -> np.ndarray:
    """P(X >= x) at each drawn value: 1 - F + 1/n, so the largest sample sits at 1/n (> 0)."""
    return 1.0 - cdf.fraction + cdf.fraction[0] if len(cdf.fraction) else cdf.fraction


def cdf_chart(sweep: SweepInput, metric: str) -> Chart | None:
    """TBT or TTFT distribution per budget, one line each, drawn as the tail: the fraction of
    samples at or above each value, both axes log, so p99 and p99.9 are readable rather than
    squashed against 1. None without samples."""
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
                x=round_sig(np.maximum(cdf.values_ms, 1e-3)),
                y=round_sig(survival(cdf), 5),
                mode="lines",
                line={"color": colors[point.budget_tokens], "width": 2, "shape": "hv"},
                name=f"budget {point.label}",
                hovertemplate=f"budget {point.label}: %{{y:.3%}} of samples at or above "
                "%{x:.3g} ms<extra></extra>",
            )
        )
    style_layout(fig, x_title=f"{name} (ms, log)", y_title="fraction of samples at or above (log)")
    # Zero gaps (tokens of one merged chunk) would stretch a log axis over decades of nothing:
    # start it at the 0.5th percentile of the budgets' positive samples (zeros sit off its left).
    low_ms = min(_positive_value_at(cdf, 0.005) for _, cdf in with_cdf)
    high_ms = max(float(cdf.values_ms[-1]) for _, cdf in with_cdf)
    if slo is not None:
        low_ms, high_ms = min(low_ms, slo), max(high_ms, slo)
    low_ms = max(low_ms, 1e-3)
    high_ms = max(high_ms, low_ms)  # all samples zero: still a valid log range
    fig.update_xaxes(type="log", range=[math.log10(low_ms / 1.5), math.log10(high_ms * 1.3)])
    tail = 1.0 - sweep.percentile / 100
    floor = min(float(survival(cdf)[-1]) for _, cdf in with_cdf)
    if tail > 0:
        floor = min(floor, tail)
    fig.update_yaxes(type="log", range=[math.log10(floor / 2), math.log10(1.05)])
    if tail > 0:
        hline(fig, tail, f"{pct_name(sweep.percentile)} ({tail:.2g} above)", NEUTRAL_COLOR, "dot")
    if slo is not None:
        vline(fig, slo, f"SLO {format_ms(slo)}", SLO_COLOR, "dash")
    unit = "gap between two tokens of one request" if metric == "tbt" else "request"
    caption = (
        f"Each line is one budget, one sample per {unit}, drawn as its tail: the share of "
        f"samples at or above each value. A line crossing the dotted {pct_name(sweep.percentile)}"
        " level left of the red SLO line meets the SLO there. "
    )
    caption += (
        "Larger budgets shift the TBT tail right: long prompts slow the decodes beside them."
        if metric == "tbt"
        else "Small budgets stretch the TTFT tail: a long prompt needs many iterations; "
        "a shoulder in a curve (two populations) hints at head-of-line blocking among prefills. "
        "Failed requests count in the shares but have no TTFT to draw."
    )
    return Chart(f"chart-{metric}-cdf", f"{name} distribution per budget (tail)", fig, caption)


def _positive_value_at(cdf: Cdf, fraction: float) -> float:
    """The smallest drawn value above zero whose cumulative fraction reaches ``fraction``
    (the largest value when none is above zero)."""
    values = cdf.values_ms
    index = min(int(np.searchsorted(cdf.fraction, fraction)), len(values) - 1)
    positive = np.flatnonzero(values[index:] > 0)
    return float(values[index + positive[0]] if len(positive) else values[-1])


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
    style_layout(
        fig, x_title="token budget (tokens)", y_title="failed requests (count)", height=340
    )
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
