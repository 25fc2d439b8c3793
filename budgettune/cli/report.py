"""`budgettune report`: rebuild the self-contained HTML report from result files alone."""

from __future__ import annotations

import math
from pathlib import Path

import typer

from budgettune.cli import Command, app
from budgettune.cli._common import console, with_profiles_option
from budgettune.core.errors import SpecError
from budgettune.core.units import parse_duration_s


@app.command(cls=Command)
def report(
    source: Path = typer.Argument(
        ...,
        help="A sweep run folder, a results.json (replay, sweep or simulate -o) or its folder, "
        "a profile JSON, or a file holding `simulate --json` output.",
        show_default=False,
    ),
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="HTML file to write (default: report.html beside SOURCE).",
        show_default=False,
    ),
    slo_tbt: str | None = typer.Option(
        None,
        "--slo-tbt",
        help="TBT target to judge and draw (e.g. 50ms); default: none unless the run recorded one.",
        show_default=False,
    ),
    slo_ttft: str | None = typer.Option(
        None,
        "--slo-ttft",
        help="TTFT target to judge and draw (e.g. 1s); default: none unless the run recorded one.",
        show_default=False,
    ),
    percentile: float = typer.Option(
        99.0, "--percentile", help="Percentile the SLOs constrain (default 99; 99.9 also works)."
    ),
    compare: list[Path] | None = with_profiles_option(
        "Another profile JSON whose curve is drawn beside SOURCE's (repeatable), e.g. the "
        "torch profile of the model next to its vLLM one. SOURCE must be a profile."
    ),
) -> None:
    """Write one self-contained HTML page (charts embedded, opens offline) from results."""
    # plotly and the report package load here, not at CLI start-up
    from budgettune.app.report import run_report
    from budgettune.report.sources import Slo

    if not (math.isfinite(percentile) and 0 < percentile <= 100):
        raise SpecError(f"--percentile: must be in (0, 100], got {percentile:g}")
    slo = Slo(
        tbt_ms=None if slo_tbt is None else parse_duration_s(slo_tbt, field="--slo-tbt") * 1e3,
        ttft_ms=None if slo_ttft is None else parse_duration_s(slo_ttft, field="--slo-ttft") * 1e3,
        percentile=percentile,
    )
    outcome = run_report(source, output=output, slo=slo, compare=compare or ())
    console.print(
        f"report ({outcome.kind}, {len(outcome.chart_ids)} charts, "
        f"{outcome.size_bytes / 1e6:.1f} MB): {outcome.path}",
        highlight=False,
        soft_wrap=True,
    )
