"""The budget tuned with max-num-seqs on the report: recommendation.json's ``pairs`` read back as
written (and refused, naming the field, when broken), and drawn as one heatmap per SLO metric
with each cell's own figure, measured where its pair was launched and predicted elsewhere."""

from __future__ import annotations

import math

import pytest

from budgettune.core.errors import UserError
from budgettune.core.fields import Fields
from budgettune.report.html import collect_charts, render_html
from budgettune.report.inputs import ReportInput
from budgettune.report.sources import Slo
from budgettune.report.sources_sweep import pair_grid_input
from budgettune.tune.pair_grid import PairCell, PairGrid, read_pair_grid


def cell(budget: int, seqs: int, *, measured: bool, tbt: float, ttft: float) -> PairCell:
    ok = tbt <= 40 and ttft <= 1000
    return PairCell(
        budget=budget,
        max_num_seqs=seqs,
        predicted_tbt_ms=tbt * 1.1,  # the prediction differs from the measurement
        predicted_ttft_ms=ttft * 1.1,
        measured=measured,
        status="ok" if measured else None,
        tbt_ms=tbt if measured else None,
        ttft_ms=ttft if measured else None,
        ok=ok if measured else None,
        feasible=ok if measured else None,
    )


# budgets 512, 1024 x max-num-seqs 8, 32: three pairs launched, (1024, 32) the answer
GRID = PairGrid(
    budgets=(512, 1024),
    seqs_values=(8, 32),
    chosen=(1024, 32),
    launches=3,
    cells=(
        cell(512, 8, measured=False, tbt=12, ttft=3000),
        cell(512, 32, measured=True, tbt=20, ttft=400),
        cell(1024, 8, measured=True, tbt=22, ttft=2500),
        cell(1024, 32, measured=True, tbt=35, ttft=300),
    ),
)


def test_the_grid_reads_back_as_written() -> None:
    assert read_pair_grid(Fields(GRID.to_json(), "recommendation.json: pairs")) == GRID


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("budgets",), [512, "1024"], "budgets"),
        (("entries", 1, "budget"), None, "entries[1]"),
        (("chosen", "max_num_seqs"), 1.5, "chosen.max_num_seqs"),
        (("launches",), -1, "launches"),
    ],
)
def test_a_broken_grid_is_refused_naming_the_field(
    path: tuple[str | int, ...], value: object, field: str
) -> None:
    data = GRID.to_json()
    target = data
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = value  # type: ignore[index]
    with pytest.raises(UserError) as error:
        read_pair_grid(Fields(data, "recommendation.json: pairs"))
    assert field in str(error.value)


def test_each_metric_is_a_heatmap_of_measured_and_predicted_figures() -> None:
    grid = pair_grid_input(GRID, Slo(tbt_ms=40, ttft_ms=1000))
    charts = {
        chart.chart_id: chart
        for section, chart in collect_charts(ReportInput("t", "sweep", pairs=grid))
        if section == "pairs"
    }
    assert set(charts) == {"chart-pairs-tbt", "chart-pairs-ttft"}
    heat = charts["chart-pairs-tbt"].figure.data[0]
    assert list(heat.y) == ["512", "1024"] and list(heat.x) == ["8", "32"]
    # colour: log2 of the figure against the SLO; the measured figure where launched
    assert heat.z[1][1] == pytest.approx(math.log2(35 / 40))
    assert heat.z[0][0] == pytest.approx(math.log2(12 * 1.1 / 40))  # predicted, not launched
    assert "(predicted)" in heat.text[0][0] and "(predicted)" not in heat.text[1][1]
    ttft = charts["chart-pairs-ttft"].figure.data[0]
    assert ttft.z[1][0] == pytest.approx(math.log2(2500 / 1000))
    # markers: launched pairs by verdict, the chosen one starred
    overlay = charts["chart-pairs-tbt"].figure.data[1:]
    marks = {t.name: list(zip(t.x, t.y, strict=True)) for t in overlay}
    assert marks["measured, meets both SLOs"] == [("32", "512"), ("32", "1024")]
    assert marks["measured, breaks an SLO"] == [("8", "1024")]
    assert marks["chosen"] == [("32", "1024")]
    assert "3 of 4" in charts["chart-pairs-tbt"].caption


def test_the_page_has_the_two_knob_section() -> None:
    grid = pair_grid_input(GRID, Slo(tbt_ms=40, ttft_ms=1000))
    page = render_html(ReportInput("t", "sweep", pairs=grid))
    assert "The budget with max-num-seqs" in page.html
    assert {"chart-pairs-tbt", "chart-pairs-ttft"} <= set(page.chart_ids)
