"""`budgettune trace synth` and `budgettune trace inspect`: make a synthetic trace file, and
summarise any trace (table and terminal histograms, or ``--json``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from budgettune.app.requests import DEFAULT_OUTPUT_DIST, DEFAULT_PROMPT_DIST
from budgettune.cli import Command, Group, app, shows_unicode
from budgettune.cli import _trace_options as to
from budgettune.cli._common import console, console_err, print_json, print_warning

if TYPE_CHECKING:  # the trace readers (numpy) load when a subcommand runs
    from rich.table import Table

    from budgettune.trace.inspect import Histogram, TraceStats

trace_app = typer.Typer(
    name="trace",
    help="Synthesize and inspect traffic traces (Azure, Mooncake, BurstGPT, Vidur, vllm bench, "
    "budgettune JSONL, any CSV).",
    no_args_is_help=True,
    rich_markup_mode="rich",
    cls=Group,
)
app.add_typer(trace_app, name="trace")


@trace_app.command("synth", cls=Command)
def synth(
    *,
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="File to write (budgettune JSON Lines); - for stdout."),
    ],
    prompt_dist: Annotated[
        str, typer.Option("--prompt-dist", help="Prompt length distribution.")
    ] = DEFAULT_PROMPT_DIST,
    output_dist: Annotated[
        str, typer.Option("--output-dist", help="Output length distribution.")
    ] = DEFAULT_OUTPUT_DIST,
    rate: Annotated[float, typer.Option("--rate", help="Mean arrival rate, requests/s.")],
    requests: to.Requests = None,
    duration: to.Duration = None,
    arrivals: Annotated[str, typer.Option("--arrivals", help="poisson | gamma.")] = "poisson",
    burstiness: to.Burstiness = to.DEFAULTS.burstiness,
    prefix_groups: Annotated[
        int,
        typer.Option("--prefix-groups", help="Requests share one of this many prefixes (0: none)."),
    ] = 0,
    prefix_tokens: Annotated[
        str,
        typer.Option(
            "--prefix-tokens", help="Length of each shared prefix, tokens (e.g. 512 or 2k)."
        ),
    ] = "0",
    conversation_turns: Annotated[
        int,
        typer.Option(
            "--conversation-turns",
            help="Requests are the turns of conversations of this many turns (0: none): each "
            "turn's prompt is the conversation so far (earlier prompts and answers) plus new "
            "text from --prompt-dist; conversations start at --rate / turns.",
        ),
    ] = 0,
    think_time: Annotated[
        str,
        typer.Option(
            "--think-time",
            help="Mean time between a conversation's turns (exponential), e.g. 10s.",
        ),
    ] = "10s",
    conversations: Annotated[
        Path | None,
        typer.Option(
            "--conversations",
            help="Recorded conversations (ShareGPT-style JSON or JSON Lines: 'conversations' of "
            "from/value or 'messages' of role/content) instead of --prompt-dist and "
            "--output-dist: each turn's new text and answer are counted by --tokenizer, and "
            "the turns replay as with --conversation-turns (which then caps each "
            "conversation's turns).",
        ),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="With --conversations: the tokenizer that counts their tokens (a model "
            "folder, a tokenizer.json, or a model id in the Hugging Face cache; nothing is "
            "downloaded).",
        ),
    ] = None,
    seed: to.Seed = to.DEFAULTS.seed,
) -> None:
    """Write a seeded synthetic trace (Poisson or gamma arrivals, lengths from distributions or
    recorded conversations)."""
    from budgettune.app.trace import synth_trace
    from budgettune.core.units import parse_duration_s, parse_positive_float, parse_tokens
    from budgettune.trace.dists import parse_length_dist

    stats = synth_trace(
        output,
        prompt_dist=parse_length_dist(prompt_dist, field="prompt_dist"),
        output_dist=parse_length_dist(output_dist, field="output_dist"),
        rate_per_s=parse_positive_float(rate, field="rate"),
        requests=requests,
        duration_s=parse_duration_s(duration, field="duration") if duration else None,
        seed=seed,
        arrivals=arrivals.strip().lower(),
        burstiness=parse_positive_float(burstiness, field="burstiness"),
        prefix_groups=prefix_groups,
        prefix_tokens=parse_tokens(prefix_tokens, field="prefix_tokens"),
        conversation_turns=conversation_turns,
        think_time_s=parse_duration_s(think_time, field="think_time"),
        conversations=conversations,
        tokenizer=tokenizer,
    )
    if str(output) != "-":
        console_err.print(
            f"wrote {stats.requests:,} requests to {output} "
            f"({stats.span_s or 0:.1f} s, {stats.rate_per_s or 0:.2f} requests/s, "
            f"prompt mean {stats.prompt_tokens.mean:.0f}, output mean "
            f"{stats.output_tokens.mean:.0f} tokens)",
            highlight=False,
            soft_wrap=True,
        )


@trace_app.command("inspect", cls=Command)
def inspect(
    file: Annotated[Path, typer.Argument(help="Trace file (format detected from content).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document, no tables.")
    ] = False,
    format: to.Format = None,
    columns: to.Columns = None,
    max_model_len: to.MaxModelLen = None,
    on_long: to.OnLong = to.DEFAULTS.on_long,
    strict: to.Strict = False,
) -> None:
    """Summarise a trace: size, rate, burstiness, length percentiles, histograms."""
    from budgettune.app.trace import inspect_trace
    from budgettune.core.units import parse_tokens

    stats, report = inspect_trace(
        file,
        format=format,
        columns=columns,
        max_model_len=(
            parse_tokens(max_model_len, field="max_model_len") if max_model_len else None
        ),
        on_long=on_long,
        strict=strict,
        on_warning=print_warning,
    )
    if as_json:
        print_json(stats.to_json())
        return
    console.print(f"[bold]{file}[/bold]: {report.summary()}", highlight=False)
    console.print(_summary_table(stats))
    console.print(_lengths_table(stats))
    for title, histogram in (
        ("prompt tokens", stats.prompt_histogram),
        ("output tokens", stats.output_histogram),
    ):
        console.print(_histogram_table(title, histogram))


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def _summary_table(stats: TraceStats) -> Table:
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("requests", f"{stats.requests:,}")
    table.add_row("time span", _fmt(stats.span_s, ",.1f", " s"))
    table.add_row("mean rate", _fmt(stats.rate_per_s, ".3f", " requests/s"))
    table.add_row("inter-arrival CV", _fmt(stats.interarrival_cv, ".2f", "  (1 = Poisson)"))

    shares = "  ".join(f"> {b:,}: {share:.1%}" for b, share in stats.prompt_share_above)
    table.add_row("prompts above", shares)
    if stats.shared_prefix_share is None:
        table.add_row("shared prefix", "none recorded")
    else:
        table.add_row(
            "shared prefix",
            f"{stats.shared_prefix_share:.1%} of requests, "
            f"{stats.shared_prefix_token_share or 0:.1%} of prompt tokens",
        )
        if stats.cache_hit_share is not None:
            table.add_row(
                "prefix cache",
                f"{stats.cache_hit_share:.1%} of prompt tokens hit with unbounded space "
                "(16-token blocks)",
            )
    return table


def _num(value: float) -> str:
    return f"{value:,.0f}" if value == round(value) else f"{value:,.1f}"


def _lengths_table(stats: TraceStats) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("tokens", style="bold")
    for name in ("mean", "p50", "p90", "p99", "max"):
        table.add_column(name, justify="right")
    for name, s in (("prompt", stats.prompt_tokens), ("output", stats.output_tokens)):
        table.add_row(name, _num(s.mean), _num(s.p50), _num(s.p90), _num(s.p99), f"{s.max:,}")
    return table


_BAR_WIDTH = 40
_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(fraction: float) -> str:
    """A bar in eighths of a character; in '#' where the output cannot show block characters
    (an ASCII or latin-1 terminal, PYTHONIOENCODING=ascii)."""
    if not shows_unicode(console.encoding):
        return "#" * round(fraction * _BAR_WIDTH)
    eighths = round(fraction * _BAR_WIDTH * 8)
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def _histogram_table(title: str, histogram: Histogram) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(justify="right")
    table.add_column(no_wrap=True)
    table.add_column(justify="right")
    table.add_column(justify="right", style="dim")
    total = sum(histogram.counts) or 1
    peak = max(histogram.counts) or 1
    for low, high, count in zip(
        histogram.edges, histogram.edges[1:], histogram.counts, strict=False
    ):
        table.add_row(
            f"{low:,}-{high - 1:,}",
            Text(_bar(count / peak), style="cyan"),
            f"{count:,}",
            f"{count / total:.1%}",
        )
    return table
