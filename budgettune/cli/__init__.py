"""The command line: typer only. Each command lives in its own module of this package and calls
one function of :mod:`budgettune.app`; nothing below ``cli`` imports typer or prints tables.

A command's module is imported only when that command runs (or its own ``--help`` is asked):
``budgettune --help`` lists the commands from :data:`COMMANDS` and ``--version`` imports no
command at all, so neither pays for numpy, httpx or the engines.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup, _click

from budgettune.core.errors import BudgettuneError

# rich (through cli._common) is imported where an error is printed or a command runs: --version
# needs neither.

# Every command: the module that registers it on ``app`` when imported, and the first paragraph
# of its help as ``budgettune --help`` lists it (tests/test_cli_help.py checks it is the
# command's own).
COMMANDS: dict[str, tuple[str, str]] = {
    "profile": (
        "budgettune.cli.profile",
        "Measure iteration time against tokens (prefill, decode, mixed), find the ridge P*,\n"
        "calibrate the step-time model and save it as a profile for `simulate --profile`.",
    ),
    "replay": (
        "budgettune.cli.replay",
        "Replay traffic on a live engine and measure TTFT, TBT (ITL), TPOT and E2E.",
    ),
    "report": (
        "budgettune.cli.report",
        "Write one self-contained HTML page (charts embedded, opens offline) from results.",
    ),
    "roofline": (
        "budgettune.cli.roofline",
        "Print the ridge P* (memory- to compute-bound) and model iteration times.",
    ),
    "serve": (
        "budgettune.cli.serve",
        "Serve the simulated engine on an OpenAI-compatible API until Ctrl-C.",
    ),
    "simulate": (
        "budgettune.cli.simulate",
        "Simulate the token-budget scheduler on synthetic traffic or a trace and compare budgets.",
    ),
    "sweep": (
        "budgettune.cli.sweep",
        "Recommend the largest token budget whose p99 TBT and TTFT meet your SLOs, verified live.",
    ),
    "tiny-model": (
        "budgettune.cli.tiny_model",
        "Build a tiny random-weight Llama (4 layers, hidden 256, ~11 MB) with a locally trained\n"
        "byte-level BPE tokenizer, in a folder `vllm serve` and transformers load. Deterministic "
        "from\n--seed. Needs `pip install 'budgettune\\[torch]'`.",
    ),
    "trace": (
        "budgettune.cli.trace",
        "Synthesize and inspect traffic traces (Azure, Mooncake, BurstGPT, Vidur, vllm bench, "
        "budgettune JSONL, any CSV).",
    ),
}


class _LazyCommand(TyperCommand):
    """A command listed by name and help alone; its module is imported, and the real command
    built, only when it is parsed (``make_context``), so the group's help costs no imports."""

    def __init__(self, name: str, module: str, summary: str) -> None:
        super().__init__(name, help=summary)
        self.module = module
        self._real: _click.Command | None = None

    def load(self) -> _click.Command:
        """The real command (a typer command, or a group such as ``trace``)."""
        if self._real is None:
            importlib.import_module(self.module)
            self._real = _built(self.name or "")
        return self._real

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        return self.load().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:  # the real command's context invokes the real command
        return self.load().invoke(ctx)


def _built(name: str) -> _click.Command:
    """The click command typer builds for ``name`` once its module registered it on ``app``."""
    short, markup = app.pretty_exceptions_short, app.rich_markup_mode
    for info in app.registered_commands:
        callback_name = info.callback.__name__ if info.callback else ""
        if (info.name or typer.main.get_command_name(callback_name)) == name:
            return typer.main.get_command_from_info(
                info, pretty_exceptions_short=short, rich_markup_mode=markup
            )
    for group in app.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(
                group,
                pretty_exceptions_short=short,
                rich_markup_mode=markup,
                suggest_commands=app.suggest_commands,
            )
    raise LookupError(f"{name}: its module registered no such command")  # a bug in COMMANDS


def _hide_flag_types(params: Sequence[Any]) -> None:
    """typer's help prints a type beside every option, a flag's too (`--json <bool>`), though a
    flag takes no value: an empty metavar leaves the type column blank. Set while the help is
    drawn, which then exits."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""


class Group(TyperGroup):
    """A group of budgettune commands (``trace``): its help lists no type beside a flag."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _hide_flag_types(self.get_params(ctx))
        super().format_help(ctx, formatter)


class _Group(Group):
    """Turns budgettune's own errors into one line on stderr and their exit code, no traceback;
    and the option parser's errors (``--rate abc``, an unknown option) into the same one line,
    where typer would draw a boxed usage message. Commands not imported yet are listed from
    :data:`COMMANDS` and load when used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, (module, summary) in sorted(COMMANDS.items()):
            self.commands.setdefault(name, _LazyCommand(name, module, summary))

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(self.commands)

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
        self.argv = argv  # for Command: which spelling of an option the user typed
        from budgettune.core.auth import forget_secrets

        forget_secrets()  # each command hides the secrets it is given, none before
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **forward)
        except _click.exceptions.NoArgsIsHelpError as error:
            sys.exit(error.exit_code)  # `budgettune` alone: the help was printed while raising
        except _click.exceptions.ClickException as error:
            from budgettune.cli._common import console_err

            console_err.print(
                f"[bold red]error:[/bold red] {usage_error_line(error, argv)}",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(error.exit_code)
        except typer.Abort:
            from budgettune.cli._common import console_err

            console_err.print("[yellow]aborted[/yellow]")
            sys.exit(1)
        # Without standalone mode, click returns an Exit's code (``--help`` gives 0) or the
        # command's return value; budgettune's commands return None.
        sys.exit(result if isinstance(result, int) else 0)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BudgettuneError as error:
            from budgettune.cli._common import print_error

            print_error(error, getattr(error, "flag", None))
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            from budgettune.cli._common import console_err

            console_err.print("[yellow]interrupted[/yellow]")
            raise typer.Exit(130) from None
        except OSError as error:  # one no layer turned into its own error: an OS limit
            from budgettune.cli._common import print_error
            from budgettune.core.files import os_error

            found = os_error(error)
            print_error(found)
            raise typer.Exit(found.exit_code) from None


class Command(TyperCommand):
    """A budgettune command: an error about a field this command has an option for names the
    option as typed (``max_num_seqs`` -> ``--max-num-seqs``). Domain code knows fields, not
    flags; this is the one place that maps one to the other."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BudgettuneError as error:
            argv = getattr(ctx.find_root().command, "argv", ())
            for param in self.params:
                if param.name == error.field and param.opts:
                    error.flag = flag_spelling(param.opts, argv)  # type: ignore[attr-defined]
            raise

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _hide_flag_types(self.get_params(ctx))
        super().format_help(ctx, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        _check_plain_numbers(ctx, self.get_params(ctx), args)
        return super().parse_args(ctx, args)


# A number as a user writes one: ASCII digits, a point, an exponent. Python's int() and float()
# also read "1_6" (16), "１６" (full-width digits), "inf" and "nan": each is refused here, once
# for every numeric option of every command, before the option's own range check.
_PLAIN_NUMBER = {
    int: re.compile(r"[+-]?[0-9]+"),
    float: re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?"),
}


def _check_plain_numbers(ctx: Any, params: Sequence[Any], args: Sequence[str]) -> None:
    """Refuse a value of an int or float option that is not written as a plain number."""
    numeric = {}
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        kind = getattr(descriptor, "annotation", None)
        if kind in _PLAIN_NUMBER and not getattr(param, "is_flag", False):
            numeric.update(dict.fromkeys(param.opts, (param, kind)))
    for index, word in enumerate(args):
        if word == "--":
            break
        opt, equals, value = word.partition("=")
        if opt not in numeric:
            continue
        if not equals:  # "--rate 16": the value is the next word
            if index + 1 >= len(args):
                continue  # the parser says the value is missing
            value = args[index + 1]
        param, kind = numeric[opt]
        if not _PLAIN_NUMBER[kind].fullmatch(value):
            example = "16" if kind is int else "16, 0.5 or 1e3"
            raise _click.exceptions.BadParameter(
                f"write a plain {'whole ' if kind is int else ''}number, e.g. {example}",
                ctx=ctx,
                param=param,
            )


def flag_spelling(opts: Sequence[str], argv: Sequence[str]) -> str:
    """The spelling of an option the user typed (``--gpu`` where ``--gpu-name`` also works),
    else its first long spelling."""
    given = _given(opts, argv)
    if given is not None:
        return given[0]
    return next((opt for opt in opts if opt.startswith("--")), opts[0])


def usage_error_line(error: Any, argv: Sequence[str]) -> str:
    """One line for a parser error, naming the option and the value it could not take."""
    command = error.ctx.command_path if getattr(error, "ctx", None) else "budgettune"
    see = f"(see '{command} --help')"
    unknown = getattr(error, "option_name", None)
    if isinstance(error, _click.exceptions.NoSuchOption) and unknown:
        # budgettune takes no pipeline-parallel size: say why, not only that the option is unknown
        from budgettune.engines.served import PIPELINE_REFUSED, passthrough_flag, pipeline_flag

        flag = passthrough_flag(unknown)
        if flag is not None and pipeline_flag(flag, abbreviations=True):
            return f"{unknown}: {PIPELINE_REFUSED} {see}"
    opts = getattr(getattr(error, "param", None), "opts", None) or []
    given = _given(opts, argv) if opts and error.message else None
    value = None if given is None else given[1]
    if value is None:
        return f"{error.format_message()} {see}"
    return f"{max(opts, key=len)}: got {value!r}: {error.message} {see}"


def _given(opts: Sequence[str], argv: Sequence[str]) -> tuple[str, str | None] | None:
    """Where the user gave an option, last one wins: the spelling typed and the text after it
    (``--rate abc`` or ``--rate=abc``; None when nothing follows); None when not given."""
    found = None
    for index, word in enumerate(argv):
        for opt in opts:
            if word == opt:
                found = (opt, argv[index + 1] if index + 1 < len(argv) else None)
            elif word.startswith(opt + "="):
                found = (opt, word[len(opt) + 1 :])
    return found


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
        from budgettune import __version__

        typer.echo(f"budgettune {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """budgettune: measure, do not guess, the chunked-prefill token budget."""


def _terminate_like_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM (systemd, Kubernetes, `kill`) takes the Ctrl-C path: stop sending, stop the
    engine, write what was measured. asyncio's own SIGINT handler does that when it is installed;
    otherwise (SIGINT ignored, as in a background job) Python's default one raises
    KeyboardInterrupt."""
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    os.kill(os.getpid(), signal.SIGINT)


def shows_unicode(encoding: str | None) -> bool:
    """Whether an output stream of this encoding can show every character (a UTF encoding)."""
    return (encoding or "").lower().replace("-", "") in ("utf8", "utf16", "utf32")


def _replace_what_the_terminal_cannot_show() -> None:
    """On a stream that cannot encode every character (PYTHONIOENCODING=ascii, a latin-1
    terminal) a table's rules and histogram bars would raise UnicodeEncodeError half-way through
    the output: such characters are written as '?' instead."""
    for stream in (sys.stdout, sys.stderr):
        if not shows_unicode(getattr(stream, "encoding", None)) and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")


def main() -> None:
    """Console entry point (``budgettune``)."""
    signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)
    _replace_what_the_terminal_cannot_show()
    try:
        app()
    except BudgettuneError as error:  # raised outside a command (e.g. while parsing)
        from budgettune.cli._common import print_error

        print_error(error)
        sys.exit(error.exit_code)
