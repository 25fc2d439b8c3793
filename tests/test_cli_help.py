"""`roofline --help` and `simulate --help` state every option's unit and default (issue 2)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from budgettune.cli import COMMANDS, app

# The traffic options shared with replay, sweep and trace synth (cli/_trace_options.py) are
# checked with the trace commands; simulate's own traffic defaults (--rate, --requests,
# --arrivals, --output-dist) are checked here.
SHARED_TRAFFIC = {
    "--trace", "--format", "--columns", "--burstiness", "--time-scale", "--window",
    "--duration", "--max-model-len", "--on-long", "--strict", "--seed", "--prompt-dist",
}  # fmt: skip
# Options that name a thing rather than measure one.
NAMES = {
    "--model", "--gpu", "--dtype", "--mode", "--profile", "--output", "--arrivals",
    "--prefix-caching",  # a choice: engine, on or off
}  # fmt: skip
UNIT = re.compile(
    r"tokens|\bms\b|TB/s|\bGB\b|TFLOP/s|\b0-1\b|\bcount\b|requests/s|\bGPUs\b|e\.g\. \d+m?s\b"
)
DEFAULT = re.compile(r"\bdefault\b|\bunset\b|without it", re.IGNORECASE)


def _command(name: str) -> typer.core.TyperCommand | typer.core.TyperGroup:
    """The real command behind ``name`` (the group lists it lazily until it is used)."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    listed = group.commands[name]
    return listed.load() if hasattr(listed, "load") else listed  # type: ignore[no-any-return]


def _options(command: str) -> list[typer.core.TyperOption]:
    params = _command(command).params
    return [p for p in params if isinstance(p, typer.core.TyperOption)]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_shows_each_commands_own_help(name: str) -> None:
    """`budgettune --help` lists the commands without importing them: the summary it shows is
    the first paragraph of the command's own help, so the two cannot drift apart."""
    own = inspect.cleandoc(_command(name).help or "").split("\n\n")[0]
    assert COMMANDS[name][1] == own


def test_root_help_and_version_import_no_command() -> None:
    """`budgettune --help` and `--version` import typer and rich only: no command module, no
    numpy, httpx or engine (each would cost start-up time on every call)."""
    code = (
        "import sys; sys.argv = ['budgettune', sys.argv[1]]\n"
        "from budgettune.cli import main\n"
        "try:\n    main()\n"
        "except SystemExit:\n    pass\n"
        "heavy = ('numpy', 'httpx', 'scipy', 'plotly', 'budgettune.cli.', 'budgettune.engines',"
        " 'budgettune.app')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    for flag in ("--help", "--version"):
        done = subprocess.run(
            [sys.executable, "-c", code, flag], capture_output=True, text=True, check=True
        )
        assert done.stdout.strip().splitlines()[-1] == "[]", (flag, done.stdout[-300:])


@pytest.mark.parametrize("command", ["roofline", "simulate"])
def test_every_option_states_its_unit_and_default(command: str) -> None:
    checked = 0
    for option in _options(command):
        name = option.opts[0]
        if option.is_flag or name in SHARED_TRAFFIC:
            continue  # flags are off unless given
        checked += 1
        text = option.help or ""
        assert name in NAMES or UNIT.search(text), f"{name}: no unit in {text!r}"
        shown = option.default is not None and option.default != [] and option.show_default
        assert shown or DEFAULT.search(text), f"{name}: no default in {text!r}"
    assert checked >= 15


@pytest.mark.parametrize("command", ["roofline", "simulate"])
def test_defaults_are_rendered_in_help(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "240"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for needle in (
        "[default: llama-3.1-8b]", "[default: h100-sxm]", "[default: measured]",
        "[default: bfloat16]",
    ):  # fmt: skip
        assert needle in text, needle
    # the efficiency, t0 and variant options: the calibration's figures unless given
    for option in ("--compute-efficiency", "--bandwidth-efficiency", "--kv-bandwidth-efficiency"):
        assert option in text, option
    assert text.count("default: the calibration's") >= 4
    if command == "simulate":
        for needle in (
            "[default: 256,512,1024,2048,8192,none]", "[default: 256]", "[default: 0.9]",
            "[default: 16]", "[default: 50ms]", "[default: 1s]", "default 16 without --trace",
            "default 2000 without --trace",
        ):  # fmt: skip
            assert needle in text, needle
    else:
        assert "[default: 128,256,512,1024,2048]" in text


def test_names_written_out_for_the_help_match_their_registries() -> None:
    """The help states engine, format and profile-engine names without importing the engines
    or the trace readers: each copy must list what the registry holds."""
    from budgettune.app.profile import ENGINES as PROFILE_ENGINES
    from budgettune.cli import _engine_options, _trace_options
    from budgettune.cli import profile as profile_cli
    from budgettune.engines.registry import engine_names
    from budgettune.trace.formats import FORMATS

    assert tuple(_engine_options.ENGINE_NAMES) == tuple(engine_names())
    assert tuple(_trace_options.FORMAT_NAMES) == tuple(FORMATS)
    assert tuple(profile_cli.ENGINES) == tuple(PROFILE_ENGINES)


HELP_PAGES = [[], ["trace", "synth"], ["trace", "inspect"], *([name] for name in sorted(COMMANDS))]


@pytest.mark.parametrize("args", HELP_PAGES, ids=lambda args: " ".join(args) or "budgettune")
def test_a_flag_shows_no_type(args: list[str]) -> None:
    """A flag takes no value: its help row has no `<bool>` beside it (typer prints one)."""
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "240"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if "--help" in line]
    assert rows and "Show this message and exit." in rows[0]
    assert "<bool>" not in result.output


def test_tensor_parallel_has_one_spelling() -> None:
    """--tensor-parallel-size, as the engines and sweep spell it, wherever a command takes it
    (the older --tensor-parallel still works)."""
    spelled = {}
    for name in sorted(COMMANDS):
        command = _command(name)
        commands = (
            command.commands.values() if isinstance(command, typer.core.TyperGroup) else [command]
        )
        for each in commands:
            for param in each.params:
                if any("tensor-parallel" in opt for opt in getattr(param, "opts", [])):
                    spelled[f"{name} {each.name}"] = param.opts[0]
    assert len(spelled) >= 4, spelled  # roofline, simulate, profile, sweep, replay, serve
    assert set(spelled.values()) == {"--tensor-parallel-size"}, spelled


# The option panels several commands share, in the order every command shows them; a command's
# own panels (sweep's Search, ...) come after.
SHARED_PANELS = ("SLOs", "Engine", "Traffic", "Load generator")


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - {"trace"}))
def test_shared_panels_come_in_one_order(name: str) -> None:
    panels: list[str] = []
    for param in _command(name).params:
        panel = (getattr(param, "rich_help_panel", None) or "Options").split(" (")[0]
        if panel not in panels:
            panels.append(panel)
    shared = [panel for panel in panels if panel in SHARED_PANELS]
    assert shared == [panel for panel in SHARED_PANELS if panel in shared], panels
    own = [panel for panel in panels if panel not in (*SHARED_PANELS, "Options")]
    assert all(panels.index(p) > panels.index(s) for p in own for s in shared), panels
