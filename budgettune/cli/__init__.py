"""The command line: typer only. Each command lives in its own module of this package and calls
one function of :mod:`budgettune.pipeline` (or of the stage it fronts); nothing below ``cli``
imports typer or prints tables.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, _click

from budgettune import __version__
from budgettune.cli._common import console_err, print_error
from budgettune.core.errors import BudgettuneError


class _Group(TyperGroup):
    """Turns budgettune's own errors into one line on stderr and their exit code, no traceback;
    and the option parser's errors (``--rate abc``, an unknown option) into the same one line,
    where typer would draw a boxed usage message."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        forward = dict(extra, windows_expand_args=windows_expand_args)
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **forward)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **forward)
        except _click.exceptions.NoArgsIsHelpError as error:
            sys.exit(error.exit_code)  # `budgettune` alone: the help was printed while raising
        except _click.exceptions.ClickException as error:
            console_err.print(
                f"[bold red]error:[/bold red] {usage_error_line(error, argv)}",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(error.exit_code)
        except typer.Abort:
            console_err.print("[yellow]aborted[/yellow]")
            sys.exit(1)
        # Without standalone mode, click returns an Exit's code (``--help`` gives 0) or the
        # command's return value; budgettune's commands return None.
        sys.exit(result if isinstance(result, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BudgettuneError as error:
            print_error(error, getattr(error, "flag", None))
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            console_err.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130) from None


class Command(TyperCommand):
    """A budgettune command: an error about a field this command has an option for names the
    option as typed (``max_num_seqs`` -> ``--max-num-seqs``). Domain code knows fields, not
    flags; this is the one place that maps one to the other."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BudgettuneError as error:
            flags = {param.name: max(param.opts, key=len) for param in self.params if param.opts}
            if error.field in flags:
                error.flag = flags[error.field]  # type: ignore[attr-defined]
            raise


def usage_error_line(error: Any, argv: Sequence[str]) -> str:
    """One line for a parser error, naming the option and the value it could not take."""
    command = error.ctx.command_path if getattr(error, "ctx", None) else "budgettune"
    see = f"(see '{command} --help')"
    opts = getattr(getattr(error, "param", None), "opts", None) or []
    value = _value_given(opts, argv) if opts and error.message else None
    if value is None:
        return f"{error.format_message()} {see}"
    return f"{max(opts, key=len)}: got {value!r}: {error.message} {see}"


def _value_given(opts: Sequence[str], argv: Sequence[str]) -> str | None:
    """The text the user gave an option (``--rate abc`` or ``--rate=abc``), last one wins."""
    value = None
    for index, word in enumerate(argv):
        for opt in opts:
            if word == opt and index + 1 < len(argv):
                value = argv[index + 1]
            elif word.startswith(opt + "="):
                value = word[len(opt) + 1 :]
    return value


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
