"""Page assembly: one self-contained HTML file (plotly.js inline, no network needed to open it).

Every string that came from the user or a result file goes through :func:`html.escape`; chart
data reaches the page as plotly JSON, which escapes ``<``, ``>`` and ``/``.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import plotly.io as pio
from plotly.offline import get_plotlyjs

from budgettune.core.files import check_overwrite, make_folder, write_atomic
from budgettune.core.units import format_ms
from budgettune.report.charts import Chart, profile_chart
from budgettune.report.charts_pairs import pair_heatmap_chart
from budgettune.report.charts_run import arrival_rate_chart, timeline_chart, workload_lengths_chart
from budgettune.report.charts_sweep import (
    cdf_chart,
    failures_chart,
    latency_vs_budget_chart,
    throughput_chart,
)
from budgettune.report.inputs import (
    BudgetPoint,
    EngineConfigInput,
    Percentiles,
    Provenance,
    ReportInput,
    SweepInput,
    Verdict,
)

_PLOT_CONFIG = {"displaylogo": False, "responsive": True}

_CSS = """
:root { --fg:#1f2328; --muted:#57606a; --line:#d0d7de; --pass:#1a7f37; --fail:#cf222e; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 20px; margin: 32px 0 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 4px; }
h3 { font-size: 16px; margin: 20px 0 4px; }
.sub, .caption { color: var(--muted); } .caption { margin: 4px 0 20px; max-width: 900px; }
.verdict { border: 2px solid var(--line); border-radius: 8px; padding: 12px 18px; margin: 16px 0; }
.verdict.ok { border-color: var(--pass); background: #f0fff4; }
.verdict.bad { border-color: var(--fail); background: #fff5f5; }
.verdict .headline { font-size: 19px; font-weight: 600; margin: 4px 0 8px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border-bottom: 1px solid var(--line);
  padding: 4px 10px; text-align: left; vertical-align: top; } th { font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
#budget-table td:last-child { min-width: 200px; }
.pass { color: var(--pass); font-weight: 600; } .fail { color: var(--fail); font-weight: 600; }
pre { background: #f6f8fa; padding: 8px 12px; border-radius: 6px; overflow-x: auto;
  white-space: pre-wrap; word-break: break-all; }
.diff-add { color: #116329; background: #dafbe1; }
.diff-del { color: #82071e; background: #ffebe9; }
.diff-head { color: #57606a; }
.chart { min-height: 300px; } .notes li { color: #9a6700; }
footer { color: var(--muted); margin-top: 40px; font-size: 13px; }
"""


@dataclass(slots=True, frozen=True)
class ReportPage:
    """The rendered page and the ids of the chart divs it holds (for checks in a browser)."""

    html: str
    chart_ids: tuple[str, ...]


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _section(anchor: str, title: str, body: list[str]) -> str:
    return f'<section id="{anchor}">\n<h2>{_e(title)}</h2>\n' + "\n".join(body) + "\n</section>"


def _chart_html(chart: Chart, include_plotlyjs: bool = False) -> str:
    div = pio.to_html(
        chart.figure,
        full_html=False,
        include_plotlyjs=include_plotlyjs,
        div_id=chart.chart_id,
        config=_PLOT_CONFIG,
        default_width="100%",
        default_height=f"{int(chart.figure.layout.height or 420)}px",
    )
    return (
        f'<h3>{_e(chart.title)}</h3>\n<div class="chart">{div}</div>\n'
        f'<p class="caption">{_e(chart.caption)}</p>'
    )


def _verdict_html(verdict: Verdict) -> str:
    css = "" if verdict.ok is None else (" ok" if verdict.ok else " bad")
    parts = [f'<div class="verdict{css}" id="verdict-panel">']
    parts.append(f'<div class="headline">{_e(verdict.headline)}</div>')
    if verdict.checks:
        parts.append("<table><tr><th>check</th><th>measured</th><th>limit</th><th></th></tr>")
        for check in verdict.checks:
            mark = (
                '<span class="pass">pass</span>'
                if check.passed
                else '<span class="fail">fail</span>'
            )
            value, limit = format_ms(check.value_ms), format_ms(check.limit_ms)
            parts.append(
                f'<tr><td>{_e(check.name)}</td><td class="num">{_e(value)}</td>'
                f'<td class="num">{_e(limit)}</td><td>{mark}</td></tr>'
            )
        parts.append("</table>")
    for line in verdict.details:
        parts.append(f"<p>{_e(line)}</p>")
    if verdict.facts:
        parts.append("<table>")
        for label, value in verdict.facts:
            parts.append(f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>")
        parts.append("</table>")
    parts.append("</div>")
    return "\n".join(parts)


def _interval(value: tuple[float | None, float | None] | None) -> str | None:
    """A 95% interval's cell (None: no interval, the column may go)."""
    if value is None:
        return None
    low, high = value
    return f"{format_ms(low)} to {'unbounded' if high is None else format_ms(high)}"


def _sweep_table(sweep: SweepInput) -> str:
    """One row per budget; columns with no value at any budget are left out."""
    pct_value = sweep.percentile
    pct = f"p{pct_value:g}"

    def at(summary: Percentiles | None) -> str | None:  # None: no figure, the column may go
        return (
            None
            if summary is None or summary.at(pct_value) is None
            else format_ms(summary.at(pct_value))
        )

    def verdict(p: BudgetPoint) -> str | None:
        return None if p.passed is None else ("pass" if p.passed else "fail")

    def confidence(p: BudgetPoint) -> str | None:
        if p.confidence is None:
            return None
        return p.confidence + (f" ({p.replays} replays)" if p.replays > 1 else "")

    columns: list[tuple[str, Callable[[BudgetPoint], str | None]]] = [
        (f"{pct} TBT measured", lambda p: at(p.measured_tbt)),
        ("95% interval", lambda p: _interval(p.tbt_interval_ms)),
        (f"{pct} TBT predicted", lambda p: at(p.predicted_tbt)),
        (f"{pct} TTFT measured", lambda p: at(p.measured_ttft)),
        ("95% interval", lambda p: _interval(p.ttft_interval_ms)),
        (f"{pct} TTFT predicted", lambda p: at(p.predicted_ttft)),
        (
            "throughput (tokens/s)",
            lambda p: (
                None if p.throughput_tokens_per_s is None else f"{p.throughput_tokens_per_s:,.0f}"
            ),
        ),
        (
            "throughput predicted (tokens/s)",
            lambda p: (
                None
                if p.predicted_throughput_tokens_per_s is None
                else f"{p.predicted_throughput_tokens_per_s:,.0f}"
            ),
        ),
        (
            "goodput (req/s)",
            lambda p: None if p.goodput_per_s is None else f"{p.goodput_per_s:.3g}",
        ),
        ("prefix-cache hits", lambda p: _share(p.cache_hit_share)),
        ("hits predicted", lambda p: _share(p.predicted_cache_hit_share)),
        ("failed", lambda p: None if p.failed is None else str(p.failed)),
        ("verdict", verdict),
        ("confidence", confidence),
        # with --parallel: which budgets ran together (the same round, on different slots)
        (
            "round (slot)",
            lambda p: None if p.slot is None or p.round is None else f"{p.round} (slot {p.slot})",
        ),
        ("note", lambda p: (p.error or p.note or None) and (p.error or p.note or "")[:300]),
    ]
    points = sorted(sweep.points, key=lambda p: (p.budget_tokens is None, p.budget_tokens or 0))
    cells = [[fn(p) for _, fn in columns] for p in points]
    keep = [i for i in range(len(columns)) if any(row[i] is not None for row in cells)]
    head = "".join(f"<th>{_e(columns[i][0])}</th>" for i in keep)
    rows = [f'<table id="budget-table"><tr><th>budget (tokens)</th>{head}</tr>']
    for p, row in zip(points, cells, strict=True):
        label = p.label
        if p.budget_tokens is not None and p.budget_tokens == sweep.recommended_budget:
            label += " (recommended)"
        if p.budget_tokens is not None and p.budget_tokens == sweep.engine_default_budget:
            label += " (engine default)"
        tds = []
        for i in keep:
            text = row[i]
            if columns[i][0] == "verdict" and text is not None:
                tds.append(f'<td><span class="{text}">{text}</span></td>')
            elif columns[i][0] == "note":
                tds.append(f"<td>{_e(text or '')}</td>")
            else:
                tds.append(f'<td class="num">{_e(text or "-")}</td>')
        rows.append(f"<tr><td>{_e(label)}</td>{''.join(tds)}</tr>")
    rows.append("</table>")
    return "\n".join(rows)


def _share(value: float | None) -> str | None:
    """A 0-1 share as a percentage with one decimal; None stays None (the column may go)."""
    return None if value is None else f"{value:.1%}"


def _safe_href(path: str) -> str | None:
    """A relative link to a file beside the report; None for anything with a scheme or absolute."""
    if ":" in path.split("/", 1)[0] or path.startswith(("/", "\\")) or "://" in path:
        return None
    return quote(path, safe="/._-")


def _provenance_html(prov: Provenance) -> str:
    parts: list[str] = []
    if prov.command:
        parts.append(f'<p>Command:</p><pre id="command"><code>{_e(prov.command)}</code></pre>')
    rows: list[tuple[str, str]] = [*prov.versions, *prov.hardware]
    if prov.trace:
        rows.append(("trace", prov.trace))
    if prov.trace_sha256:
        rows.append(("trace sha256", prov.trace_sha256))
    if prov.created:
        rows.append(("created", prov.created))
    if rows:
        parts.append("<table>")
        parts += [f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows]
        parts.append("</table>")
    if prov.files:
        parts.append("<p>Raw files (full data, beside this page):</p><ul>")
        for label, path in prov.files:
            href = _safe_href(path)
            name = f"{_e(label)}: <code>{_e(path)}</code>"
            parts.append(
                f'<li><a href="{_e(href)}">{name}</a></li>' if href else f"<li>{name}</li>"
            )
        parts.append("</ul>")
    return "\n".join(parts) or "<p>No provenance recorded.</p>"


def _engine_config_html(config: EngineConfigInput) -> str:
    """The written answer as a diff against the user's file (added lines green, removed red),
    then the file itself as every launch read it."""
    parts: list[str] = []
    if config.written_name is None:
        parts.append(
            "<p>No config was written (no budget met the SLOs); every launch read the file "
            "below.</p>"
        )
    elif len(config.diff) <= 2:  # headers alone: the file already held the answer
        parts.append(
            f"<p><code>{_e(config.written_name)}</code> is your file as it was: it already "
            "held the answer.</p>"
        )
    else:
        lines = []
        for line in config.diff:
            kind = {"+": "diff-add", "-": "diff-del"}.get(line[:1], "")
            if line.startswith(("+++", "---", "@@")):
                kind = "diff-head"
            lines.append(f'<span class="{kind}">{_e(line)}</span>' if kind else _e(line))
        parts.append(
            f"<p>What <code>{_e(config.written_name)}</code> changes in your file (every other "
            "line, comments included, is as you wrote it):</p>"
            f'<pre id="engine-config-diff"><code>{chr(10).join(lines)}</code></pre>'
        )
    parts.append(
        "<details><summary>Your engine config, as every launch read it (credentials shown as "
        f'***)</summary><pre id="engine-config-text"><code>{_e(config.text)}</code></pre>'
        "</details>"
    )
    return "\n".join(parts)


def collect_charts(report: ReportInput) -> list[tuple[str, Chart]]:
    """Every chart the page will show, with the id of the section it goes in, in page order."""
    charts: list[tuple[str, Chart | None]] = []
    if report.profile is not None and report.profile.curves:
        charts.append(("profile", profile_chart(report.profile)))
    if report.pairs is not None:
        charts.append(("pairs", pair_heatmap_chart(report.pairs, "tbt")))
        charts.append(("pairs", pair_heatmap_chart(report.pairs, "ttft")))
    sweep = report.sweep
    if sweep is not None and sweep.points:
        numeric = sweep.numeric_points()
        if len(numeric) >= 2:  # one budget is a table row, not a curve
            charts.append(("sweep", latency_vs_budget_chart(sweep, "tbt")))
            charts.append(("sweep", latency_vs_budget_chart(sweep, "ttft")))
            if any(
                p.throughput_tokens_per_s is not None
                or p.predicted_throughput_tokens_per_s is not None
                or p.goodput_per_s is not None
                for p in numeric
            ):
                charts.append(("sweep", throughput_chart(sweep)))
        charts.append(("sweep", cdf_chart(sweep, "tbt")))
        charts.append(("sweep", cdf_chart(sweep, "ttft")))
        if any(p.failed or p.error for p in sweep.points):
            charts.append(("sweep", failures_chart(sweep)))
    if report.workload is not None and len(report.workload.prompt_tokens):
        charts.append(("workload", workload_lengths_chart(report.workload)))
        charts.append(("workload", arrival_rate_chart(report.workload)))
    if report.timeline is not None:
        charts.append(("timeline", timeline_chart(report.timeline)))
    return [(section, chart) for section, chart in charts if chart is not None]


_SECTIONS = (
    ("profile", "Profile: iteration time against tokens"),
    ("pairs", "The budget with max-num-seqs"),
    ("sweep", "Budgets against the SLOs"),
    ("workload", "Workload"),
    ("timeline", "One replay's token timeline"),
)


def render_html(report: ReportInput) -> ReportPage:
    """The whole page as one string, plotly.js inline in the head."""
    charts = collect_charts(report)
    body: list[str] = [
        "<header>",
        f"<h1>{_e(report.title)}</h1>",
        f'<p class="sub">budgettune {_e(report.kind)} report'
        + (f" · {_e(report.provenance.created)}" if report.provenance.created else "")
        + "</p>",
        "</header>",
    ]
    if report.verdict is not None:
        body.append(_section("verdict", "Verdict", [_verdict_html(report.verdict)]))
    if report.notes:
        items = "".join(f"<li>{_e(n)}</li>" for n in report.notes)
        body.append(f'<ul class="notes">{items}</ul>')
    for anchor, title in _SECTIONS:
        parts = [_chart_html(chart) for section, chart in charts if section == anchor]
        if anchor == "sweep" and report.sweep is not None and report.sweep.points:
            parts.insert(0, _sweep_table(report.sweep))
            if not any(p.failed or p.error for p in report.sweep.points):
                parts.append(
                    '<p class="caption" id="no-failures">No request failed at any budget '
                    "(a failure would count as an SLO violation, never be dropped).</p>"
                )
        if parts:
            body.append(_section(anchor, title, parts))
    if report.engine_config is not None:
        parts = [_engine_config_html(report.engine_config)]
        body.append(_section("engine-config", "Your engine config", parts))
    body.append(_section("reproduce", "Reproducibility", [_provenance_html(report.provenance)]))
    body.append(
        "<footer>Generated by budgettune. Self-contained: plotly.js is embedded; opening this "
        "page needs no network. Rebuild it from the raw files with "
        "<code>budgettune report</code>.</footer>"
    )
    page = "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            GENERATOR_TAG,
            f"<title>{_e(report.title)}</title>",
            f"<style>{_CSS}</style>",
            # plotly.js once, inline: the page must open offline.
            f'<script type="text/javascript">{get_plotlyjs()}</script>',
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
        ]
    )
    return ReportPage(page, tuple(chart.chart_id for _, chart in charts))


GENERATOR_TAG = '<meta name="generator" content="budgettune">'


def is_report_page(head: bytes) -> bool:
    """Whether a file's first bytes are a page budgettune wrote (its generator tag, or the
    title every budgettune page had before it)."""
    return GENERATOR_TAG.encode() in head or b"<title>budgettune" in head


def write_report(report: ReportInput, path: Path) -> ReportPage:
    """Render ``report`` and write it to ``path`` atomically (parent folders created), over a
    page budgettune wrote only (UserError on field ``output`` otherwise); StorageError when the
    disk cannot hold it."""
    page = render_html(report)
    check_overwrite(path, is_report_page, field="output", what="HTML file")
    make_folder(path.parent, field="output")
    write_atomic(path, page.html, field="output")
    return page


__all__ = [
    "GENERATOR_TAG",
    "ReportPage",
    "collect_charts",
    "is_report_page",
    "render_html",
    "write_report",
]
