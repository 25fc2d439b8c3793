"""The page: self-contained (no external script, style or link), every chart present, user
strings escaped, sections left out when their input is missing, size bounded."""

from __future__ import annotations

import re
from pathlib import Path

import report_builders as rb
from plotly.offline import get_plotlyjs

from budgettune.report.html import render_html, write_report
from budgettune.report.inputs import ReportInput

EVIL = "<script>alert(1)</script>"
ALL_CHARTS = (
    "chart-profile",
    "chart-tbt-vs-budget",
    "chart-ttft-vs-budget",
    "chart-throughput",
    "chart-tbt-cdf",
    "chart-ttft-cdf",
    "chart-failures",
    "chart-workload-lengths",
    "chart-arrivals",
    "chart-timeline",
)


def _scripts(page: str) -> list[str]:
    return re.findall(r"<script\b[^>]*>", page)


def test_page_is_self_contained() -> None:
    page = render_html(rb.make_report()).html
    tags = _scripts(page)
    assert tags and all("src=" not in tag for tag in tags)
    assert "<link" not in page and "@import" not in page and "<iframe" not in page
    # no attribute points off the page (the plotly bundle's own strings are not attributes)
    assert not re.search(
        r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", page.replace(get_plotlyjs(), "")
    )
    assert page.count(get_plotlyjs()) == 1  # plotly.js inline, once


def test_every_chart_has_a_div_and_a_plot_call() -> None:
    page = render_html(rb.make_report())
    assert page.chart_ids == ALL_CHARTS
    for chart_id in ALL_CHARTS:
        assert f'id="{chart_id}"' in page.html
        assert re.search(rf'Plotly\.newPlot\(\s*"{chart_id}"', page.html)
    assert len(re.findall(r"Plotly\.newPlot\(", page.html)) == len(ALL_CHARTS)


def test_user_strings_are_escaped_everywhere() -> None:
    page = render_html(rb.make_report(model_name=EVIL)).html
    body = page.replace(get_plotlyjs(), "")
    assert EVIL not in body
    assert "alert(1)" in body  # it is there, as text:
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    # the only script tags are plotly's bundle and one plot call per chart
    assert len(_scripts(page)) == 1 + len(ALL_CHARTS)
    # a link with a scheme is shown as text, never as a link
    assert 'href="javascript' not in body
    assert "javascript:alert(1)" in body
    assert '<a href="points.jsonl">' in body


def test_missing_sections_are_left_out() -> None:
    only_profile = ReportInput(title="p", kind="profile", profile=rb.make_profile())
    page = render_html(only_profile)
    assert page.chart_ids == ("chart-profile",)
    assert "Budgets against the SLOs" not in page.html
    assert "token timeline" not in page.html
    assert "Reproducibility" in page.html  # always there, even when empty


def test_two_thousand_request_page_stays_small(tmp_path: Path) -> None:
    report = rb.make_report()  # 2,000-request workload and timeline (500,000 tokens), 9 budgets
    page = write_report(report, tmp_path / "deep" / "report.html")
    size = (tmp_path / "deep" / "report.html").stat().st_size
    plotly_bytes = len(get_plotlyjs().encode())
    data_bytes = size - plotly_bytes
    assert size == len(page.html.encode())
    assert data_bytes < 600_000, f"{data_bytes} bytes of page beside plotly.js"
    assert size < 6_000_000
