"""Shared CLI plumbing: consoles, the one-line error printer, option parsers with clear errors."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console

from budgettune.core.errors import BudgettuneError, EngineError

console = Console()
console_err = Console(stderr=True)


def print_error(error: BudgettuneError, flag: str | None = None) -> None:
    """One line ``error: ...`` (plus hint and, for engines, the log tail) on stderr; the error's
    field is shown as ``flag`` (the option the user typed) when the command has one for it."""
    console_err.print(
        f"[bold red]error:[/bold red] {error.shown_as(flag or error.field)}",
        markup=True,
        highlight=False,
        soft_wrap=True,
    )
    if error.hint:
        console_err.print(f"  hint: {error.hint}", highlight=False, soft_wrap=True)
    if isinstance(error, EngineError) and error.log_tail:
        console_err.print("  last lines of the engine log:", highlight=False)
        for line in error.log_tail.splitlines()[-20:]:
            console_err.print(f"    {line}", markup=False, highlight=False)


def print_warning(message: str) -> None:
    """One ``warning: ...`` on stderr; also the ``on_warning`` callback of the loaders."""
    console_err.print(f"[yellow]warning:[/yellow] {message}", highlight=False, soft_wrap=True)


def print_json(document: Any) -> None:
    """Write one JSON document to stdout (no rich markup, machine-readable)."""
    sys.stdout.write(json.dumps(document, indent=2, allow_nan=False, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def with_profiles_option(help: str) -> Any:
    """``--with OTHER.json`` (repeatable): profiles drawn beside the main one in a report."""
    return typer.Option("--with", help=f"{help} Default: none.", show_default=False)
