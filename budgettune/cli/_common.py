"""Shared CLI plumbing: consoles, the one-line error printer, option parsers with clear errors."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from budgettune.core.errors import BudgettuneError, EngineError, shorten

# --percentile's words in every command that takes it (the rule: core.slo.check_percentile)
PERCENTILE_HELP = "The percentile both SLOs constrain: at least 50, below 100 (e.g. 99.9)."
MESSAGE_CHARS = 1000  # an error line is cut in its middle past this (a value echoed whole)

console = Console()
console_err = Console(stderr=True)


def print_error(error: BudgettuneError, flag: str | None = None) -> None:
    """One line ``error: ...`` (plus hint and, for engines, the log tail) on stderr; the error's
    field is shown as ``flag`` (the option the user typed) when the command has one for it.
    Message and hint are plain text: ``budgettune[torch]`` is printed, not read as markup."""
    message = shorten(error.shown_as(flag or error.field), MESSAGE_CHARS)
    console_err.print(
        f"[bold red]error:[/bold red] {escape(message)}",
        markup=True,
        highlight=False,
        soft_wrap=True,
    )
    if error.hint:
        console_err.print(
            f"  hint: {shorten(error.hint, MESSAGE_CHARS)}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if isinstance(error, EngineError) and error.log_tail:
        console_err.print("  last lines of the engine log:", highlight=False)
        for line in error.log_tail.splitlines()[-20:]:
            console_err.print(f"    {shorten(line, MESSAGE_CHARS)}", markup=False, highlight=False)


def print_warning(message: str) -> None:
    """One ``warning: ...`` on stderr; also the ``on_warning`` callback of the loaders. The
    message is plain text (brackets in it are printed, not read as markup)."""
    console_err.print(
        f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True
    )


def print_json(document: Any) -> None:
    """Write one JSON document to stdout (no rich markup, machine-readable)."""
    from budgettune.core.files import stdout_or_error

    out = stdout_or_error("the JSON document")
    out.write(json.dumps(document, indent=2, allow_nan=False, default=_json_default) + "\n")
    out.flush()


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def with_profiles_option(help: str) -> Any:
    """``--with OTHER.json`` (repeatable): profiles drawn beside the main one in a report."""
    return typer.Option("--with", help=f"{help} Default: none.", show_default=False)
