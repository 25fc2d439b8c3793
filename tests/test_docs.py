"""The documentation site builds with `mkdocs build --strict` (a broken link or a page left out
of the navigation fails it), and its CLI reference, generated from the command line itself,
lists every option of every command under that command."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]


def command_options() -> dict[str, list[str]]:
    """Every command's path (``trace synth``) and its long options, from the real commands."""
    from budgettune.cli.reference import app

    found: dict[str, list[str]] = {}

    def walk(command: Any, path: list[str]) -> None:
        if path:
            found[" ".join(path)] = [
                opt for param in command.params for opt in (*param.opts, *param.secondary_opts)
                if opt.startswith("--")
            ]  # fmt: skip
        if hasattr(command, "commands"):  # a group (typer's own click, not `click`)
            for name, sub in command.commands.items():
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


def test_the_site_builds_strict_and_its_reference_has_every_option(tmp_path: Path) -> None:
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        message = "the docs extra is not installed: pip install -e '.[docs]'"
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            pytest.fail(message)  # setup-dev.sh installs it: CI never skips the docs
        pytest.skip(message)
    site = tmp_path / "site"
    # mkdocs-typer2 runs the `typer` command: the one beside this interpreter
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "NO_MKDOCS_2_WARNING": "1"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    page = html.unescape((site / "reference" / "index.html").read_text())
    # each command's section: from its heading to the next command's
    starts = {m.group(1): m.start() for m in re.finditer(r'id="budgettune-([a-z-]+)"', page)}
    ends = [*sorted(starts.values()), len(page)]
    options = command_options()
    assert {"sweep", "profile", "trace synth", "trace inspect"} <= set(options)
    missing = []
    for path, opts in options.items():
        key = path.replace(" ", "-")
        assert key in starts, f"no section for `budgettune {path}`"
        at = starts[key]
        section = page[at : min(end for end in ends if end > at)]
        missing += [f"{path} {opt}" for opt in opts if opt not in section]
    assert not missing, missing
    assert sum(len(opts) for opts in options.values()) > 200  # the real commands, not stand-ins
