"""The traffic options ``simulate``, ``replay``, ``sweep`` and ``trace`` share, defined once as
``Annotated`` typer options, and :data:`TRAFFIC`: the group of them packed into a
:class:`~budgettune.app.requests.TrafficRequest` (see :mod:`budgettune.cli._groups`).

Usage in a command::

    @app.command(cls=Command)
    @with_groups(traffic=TRAFFIC)
    def replay(..., traffic: TrafficRequest, ...) -> None:
        ...  # build_traffic(traffic) in the app layer gives the schedule
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgettune.app.requests import (
    DEFAULT_OUTPUT_DIST,
    DEFAULT_PROMPT_DIST,
    REPLAY_REQUESTS,
    SWEEP_RATE_PER_S,
    SWEEP_REQUESTS,
    TrafficRequest,
)
from budgettune.cli._groups import OptionGroup

PANEL = "Traffic"
# The trace formats budgettune reads, for --format's help (budgettune.trace.formats.FORMATS,
# written out here so that the help costs no import of the readers; a test checks they agree).
FORMAT_NAMES = ("budgettune", "azure", "mooncake", "burstgpt", "vidur", "vllm-bench", "csv")
DEFAULTS = TrafficRequest()  # the default of each traffic option

Trace = Annotated[
    Path | None,
    typer.Option(
        "--trace",
        help="Trace file to replay (format detected from content; .gz read transparently). "
        "Replaces --prompt-dist/--output-dist. Default: none (synthetic traffic).",
        rich_help_panel=PANEL,
    ),
]
Format = Annotated[
    str | None,
    typer.Option(
        "--format",
        help=f"Trace format, when detection is not wanted: {', '.join(FORMAT_NAMES)}. "
        "Default: detected from content.",
        rich_help_panel=PANEL,
    ),
]
Columns = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Columns of a plain CSV trace: arrival=COL,prompt=COL,output=COL "
        "(also arrival_ms, prefix_group, prefix_tokens). Implies --format csv. Default: none.",
        rich_help_panel=PANEL,
    ),
]
Arrivals = Annotated[
    str | None,
    typer.Option(
        "--arrivals",
        help="recorded (the trace's own times; default when it has them) | poisson | gamma.",
        rich_help_panel=PANEL,
    ),
]
Rate = Annotated[
    float | None,
    typer.Option(
        "--rate",
        help="Mean arrival rate, requests/s (at most 100,000). With recorded arrivals: rescale "
        f"the trace to this rate. Default: the trace's own rate; synthetic traffic: sweep "
        f"{SWEEP_RATE_PER_S:g}, replay required.",
        rich_help_panel=PANEL,
    ),
]
Burstiness = Annotated[
    float,
    typer.Option(
        "--burstiness",
        help="Gamma arrivals' shape (as vllm bench serve): 1 = Poisson, < 1 burstier, > 1 "
        "smoother.",
        rich_help_panel=PANEL,
    ),
]
TimeScale = Annotated[
    float,
    typer.Option(
        "--time-scale",
        help="Recorded arrivals only: replay k times faster (gaps divided by k).",
        rich_help_panel=PANEL,
    ),
]
Window = Annotated[
    str | None,
    typer.Option(
        "--window",
        help="START:END slice of the trace by arrival time, e.g. 10m:20m or :300s (each with "
        "its unit). Default: the whole trace.",
        rich_help_panel=PANEL,
    ),
]
Requests = Annotated[
    int | None,
    typer.Option(
        "--requests",
        help="Number of requests, at most 2,000,000. Default: the whole trace; synthetic "
        f"traffic: sweep {SWEEP_REQUESTS}, replay {REPLAY_REQUESTS}; trace synth needs this or "
        "--duration.",
        rich_help_panel=PANEL,
    ),
]
Duration = Annotated[
    str | None,
    typer.Option(
        "--duration",
        help="Only requests sent before this, e.g. 60s or 10m (the unit is required; at most 7 "
        "days). Default: no limit.",
        rich_help_panel=PANEL,
    ),
]
MaxModelLen = Annotated[
    str | None,
    typer.Option(
        "--max-model-len",
        help="Context limit in tokens (e.g. 8192 or 32K; K = 1024, k = 1000, as vLLM reads it): "
        "trace requests with prompt + output above it follow --on-long; synthetic ones are "
        "clipped (dropped with --on-long drop). Default: no limit.",
        rich_help_panel=PANEL,
    ),
]
OnLong = Annotated[
    str,
    typer.Option(
        "--on-long",
        help="Requests with prompt + output above --max-model-len: clip | drop | error.",
        rich_help_panel=PANEL,
    ),
]
Strict = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Refuse a trace whose timestamps go backwards instead of sorting it.",
        rich_help_panel=PANEL,
    ),
]
Seed = Annotated[
    int, typer.Option("--seed", help="Seed of every random draw.", rich_help_panel=PANEL)
]
PromptDist = Annotated[
    str | None,
    typer.Option(
        "--prompt-dist",
        help="Prompt length distribution in tokens, without a trace (default "
        f"{DEFAULT_PROMPT_DIST}).",
        rich_help_panel=PANEL,
    ),
]
OutputDist = Annotated[
    str | None,
    typer.Option(
        "--output-dist",
        help="Output length distribution in tokens, without a trace (default "
        f"{DEFAULT_OUTPUT_DIST}).",
        rich_help_panel=PANEL,
    ),
]

TRAFFIC = OptionGroup(
    TrafficRequest,
    {
        "trace": Trace,
        "format": Format,
        "columns": Columns,
        "arrivals": Arrivals,
        "rate": Rate,
        "burstiness": Burstiness,
        "time_scale": TimeScale,
        "window": Window,
        "requests": Requests,
        "duration": Duration,
        "max_model_len": MaxModelLen,
        "on_long": OnLong,
        "strict": Strict,
        "seed": Seed,
        "prompt_dist": PromptDist,
        "output_dist": OutputDist,
    },
)
