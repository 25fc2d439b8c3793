"""The command line: typer only. Each command lives in its own module of this package and calls
one function of :mod:`budgettune.pipeline` (or of the stage it fronts); nothing below ``cli``
imports typer or prints tables.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from budgettune import __version__
from budgettune.cli._common import console_err, print_error
from budgettune.errors import BudgettuneError


class _Group(TyperGroup):
    """Turns budgettune's own errors into one line on stderr and their exit code, no traceback."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BudgettuneError as error:
            print_error(error)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            console_err.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130) from None


app = typer.Typer(
    cls=_Group,
    name="budgettune",
    help="Pick the chunked-prefill token budget (vLLM --max-num-batched-tokens, SGLang "
    "--chunked-prefill-size) that meets your p99 TBT and TTFT targets, measured on your traffic.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"budgettune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """budgettune: measure, do not guess, the chunked-prefill token budget."""


# Each module registers its commands on ``app`` when imported.
from budgettune.cli import commands  # noqa: E402,F401


def _terminate_like_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM (systemd, Kubernetes, `kill`) takes the Ctrl-C path: stop sending, stop the
    engine, write what was measured. asyncio's own SIGINT handler does that when it is installed;
    otherwise (SIGINT ignored, as in a background job) Python's default one raises
    KeyboardInterrupt."""
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.kill(os.getpid(), signal.SIGINT)


def main() -> None:
    """Console entry point (``budgettune``)."""
    signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)
    try:
        app()
    except BudgettuneError as error:  # raised outside a command (e.g. while parsing)
        print_error(error)
        sys.exit(error.exit_code)
