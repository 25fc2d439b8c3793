"""The budget tuned with max-num-seqs: one heatmap per SLO metric over the two knobs.

Each cell is coloured by its percentile latency against the SLO (green below, red above, on a
log scale so half and twice the target are equally far from it). A cell's figure is measured
where the pair was launched and the simulator's prediction elsewhere; measured pairs carry a
marker (pass or fail), and the chosen pair a star.
"""

from __future__ import annotations

import math

import plotly.graph_objects as go

from budgettune.core.units import format_ms
from budgettune.report.charts import (
    FAIL_COLOR,
    PASS_COLOR,
    Chart,
    pct_name,
    style_layout,
)
from budgettune.report.inputs import PairCellInput, PairGridInput

# Colour: log2(latency / SLO), clipped to a quarter and four times the target.
_RATIO_LIMIT_LOG2 = 2.0
_SCALE = [
    [0.0, "#1a7f37"],
    [0.45, "#d4edda"],
    [0.5, "#fff8c5"],
    [0.55, "#ffd8d3"],
    [1.0, "#cf222e"],
]


def _value(cell: PairCellInput, metric: str) -> float | None:
    value = cell.tbt_ms if metric == "tbt" else cell.ttft_ms
    return None if value is None or math.isnan(value) else value


def _colour(value: float | None, slo_ms: float | None) -> float | None:
    if value is None or slo_ms is None or slo_ms <= 0:
        return None
    if math.isinf(value):  # failed requests: past any target
        return _RATIO_LIMIT_LOG2
    ratio = math.log2(max(value, 1e-9) / slo_ms)
    return max(-_RATIO_LIMIT_LOG2, min(_RATIO_LIMIT_LOG2, ratio))


def _cell_text(cell: PairCellInput, metric: str) -> str:
    value = _value(cell, metric)
    figure = "-" if value is None else format_ms(value)
    return figure if cell.measured else f"{figure}<br>(predicted)"


def pair_heatmap_chart(grid: PairGridInput, metric: str) -> Chart:
    """Percentile TBT (``metric="tbt"``) or TTFT (``"ttft"``) over budget and max-num-seqs."""
    name = {"tbt": "TBT", "ttft": "TTFT"}[metric]
    slo = grid.slo_tbt_ms if metric == "tbt" else grid.slo_ttft_ms
    label = f"{pct_name(grid.percentile)} {name}"
    columns = [str(s) for s in grid.seqs_values]
    rows = [str(b) for b in grid.budgets]
    by_pair = {(c.budget_tokens, c.max_num_seqs): c for c in grid.cells}
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    for budget in grid.budgets:
        row_cells = [by_pair.get((budget, seqs)) for seqs in grid.seqs_values]
        z.append([None if c is None else _colour(_value(c, metric), slo) for c in row_cells])
        text.append(["" if c is None else _cell_text(c, metric) for c in row_cells])
    fig = go.Figure(
        go.Heatmap(
            x=columns,
            y=rows,
            z=z,
            text=text,
            texttemplate="%{text}",
            hovertemplate="budget %{y}, max-num-seqs %{x}<br>%{text}<extra></extra>",
            colorscale=_SCALE,
            zmin=-_RATIO_LIMIT_LOG2,
            zmax=_RATIO_LIMIT_LOG2,
            showscale=slo is not None,
            colorbar={
                "title": {"text": "against SLO"},
                "tickvals": [-2, -1, 0, 1, 2],
                "ticktext": ["1/4", "1/2", "SLO", "2x", "4x"],
            },
        )
    )
    for passed, colour, symbol, shown in (
        (True, PASS_COLOR, "circle-open", "measured, meets both SLOs"),
        (False, FAIL_COLOR, "x-thin-open", "measured, breaks an SLO"),
    ):
        cells = [c for c in grid.cells if c.measured and c.passed is passed]
        if cells:
            fig.add_trace(_markers(cells, colour, symbol, shown))
    if grid.chosen is not None:
        fig.add_trace(
            go.Scatter(
                x=[str(grid.chosen[1])],
                y=[str(grid.chosen[0])],
                mode="markers",
                marker={"symbol": "star", "size": 18, "color": PASS_COLOR},
                name="chosen",
                hoverinfo="skip",
            )
        )
    style_layout(fig, x_title="max-num-seqs", y_title="token budget (tokens)")
    fig.update_xaxes(type="category")
    fig.update_yaxes(type="category")
    return Chart(f"chart-pairs-{metric}", f"{label} by budget and max-num-seqs", fig,
                 _caption(grid, label, slo))  # fmt: skip


def _markers(cells: list[PairCellInput], colour: str, symbol: str, shown: str) -> go.Scatter:
    return go.Scatter(
        x=[str(c.max_num_seqs) for c in cells],
        y=[str(c.budget_tokens) for c in cells],
        mode="markers",
        marker={"symbol": symbol, "size": 30, "color": colour, "line": {"width": 2}},
        name=shown,
        hoverinfo="skip",
    )


def _caption(grid: PairGridInput, label: str, slo: float | None) -> str:
    target = "" if slo is None else f" against its SLO ({format_ms(slo)})"
    pairs = len(grid.budgets) * len(grid.seqs_values)
    chosen = (
        "no pair meets both SLOs"
        if grid.chosen is None
        else f"chosen: budget {grid.chosen[0]} with max-num-seqs {grid.chosen[1]}"
    )
    return (
        f"Colour: {label}{target}, green below, red above. Ringed pairs were launched and "
        f"measured ({grid.launches} of {pairs}); the others show the simulator's prediction. "
        f"A larger budget or max-num-seqs only raises TBT and only lowers TTFT, so a measured "
        f"pair settles its neighbours. {chosen[0].upper()}{chosen[1:]}."
    )
