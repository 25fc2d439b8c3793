"""`budgettune report`: rebuild the self-contained HTML report from result files alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgettune.app.requests import ReportRequest, SloRequest
from budgettune.cli import Command, app
from budgettune.cli._common import PERCENTILE_HELP, console, with_profiles_option


@app.command(cls=Command)
def report(
    source: Annotated[
        Path,
        typer.Argument(
            help="A sweep run folder, a results.json (replay, sweep or simulate -o) or its "
            "folder, a profile JSON, or a file holding `simulate --json` output.",
            show_default=False,
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="HTML file to write (default: report.html beside SOURCE).",
            show_default=False,
        ),
    ] = None,
    slo_tbt: Annotated[
        str | None,
        typer.Option(
            "--slo-tbt",
            "--slo-itl",
            help="TBT (ITL) target to judge and draw (e.g. 50ms); default: none unless the run "
            "recorded one.",
            show_default=False,
        ),
    ] = None,
    slo_ttft: Annotated[
        str | None,
        typer.Option(
            "--slo-ttft",
            help="TTFT target to judge and draw (e.g. 1s); default: none unless the run "
            "recorded one.",
            show_default=False,
        ),
    ] = None,
    percentile: Annotated[
        float,
        typer.Option("--percentile", help=PERCENTILE_HELP),
    ] = 99.0,
    compare: Annotated[
        list[Path] | None,
        with_profiles_option(
            "Another profile JSON whose curve is drawn beside SOURCE's (repeatable), e.g. the "
            "torch profile of the model next to its vLLM one. SOURCE must be a profile."
        ),
    ] = None,
) -> None:
    """Write one self-contained HTML page (charts embedded, opens offline) from results."""
    # plotly and the report package load here, not at CLI start-up
    from budgettune.app.report import report_for

    request = ReportRequest(
        source=source,
        output=output,
        slo=SloRequest(slo_tbt, slo_ttft, percentile),
        compare=tuple(compare or ()),
    )
    outcome = report_for(request)
    console.print(
        f"report ({outcome.kind}, {len(outcome.chart_ids)} charts, "
        f"{outcome.size_bytes / 1e6:.1f} MB): {outcome.path}",
        highlight=False,
        soft_wrap=True,
    )
