"""The documented examples run: every `$ budgettune ...` line of a docs/ page that needs no real
engine and reads only files the repository ships is run as written (in a folder of its own
where the files it reads are copied from the checkout and what it writes stays), and must exit 0
and print the first line the page shows under it. A changed flag or a changed headline breaks
this test, not a reader."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
OUTPUT_OPTIONS = ("-o", "--output")
REAL_ENGINES = ("vllm", "sglang", "trtllm", "external", "torch", "aiconfigurator")


@dataclass(frozen=True, slots=True)
class Example:
    page: str
    argv: tuple[str, ...]  # after `budgettune`
    shown: str  # the first line the page shows under it ("" when none)

    @property
    def id(self) -> str:
        return f"{self.page}: {' '.join(self.argv)[:70]}"


def _blocks(text: str) -> list[list[str]]:
    return [block.split("\n") for block in re.findall(r"```[a-z]*\n(.*?)\n```", text, flags=re.S)]


def _inputs(argv: list[str]) -> list[str]:
    """The arguments that name a file the command reads (not one it writes)."""
    found, skip_next = [], False
    for i, arg in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        if arg in OUTPUT_OPTIONS:
            skip_next = True
            continue
        if "/" in arg and not arg.startswith("-") and not (argv[0] == "tiny-model" and i == 1):
            found.append(arg)
    return found


def examples() -> list[Example]:
    """Every runnable example of docs/ (see the module's docstring)."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for lines in _blocks(page.read_text()):
            for at, line in enumerate(lines):
                if not line.startswith("$ budgettune "):
                    continue
                command, rest = line[2:], at + 1
                while command.endswith("\\") and rest < len(lines):
                    command, rest = command[:-1] + " " + lines[rest].strip(), rest + 1
                argv = shlex.split(command, comments=True)[1:]
                engine = argv[argv.index("--engine") + 1] if "--engine" in argv else None
                if engine in REAL_ENGINES or "--url" in argv:
                    continue  # needs an engine this machine may not have
                if not all((ROOT / path).exists() for path in _inputs(argv)):
                    continue  # an illustration on the reader's own files
                shown = next((s for s in lines[rest:] if s.strip()), "")
                found.append(Example(page.name, tuple(argv), "" if shown[:2] == "$ " else shown))
    return found


EXAMPLES = examples()
# The sweeps replay on the embedded engine for a minute or more.
PARAMS = [
    pytest.param(e, id=e.id, marks=[pytest.mark.slow] if e.argv[0] == "sweep" else [])
    for e in EXAMPLES
]


def words(text: str) -> str:
    return " ".join(text.split())


def test_the_docs_hold_runnable_examples_of_each_kind() -> None:
    commands = {" ".join(e.argv[:2]) if e.argv[0] == "trace" else e.argv[0] for e in EXAMPLES}
    assert {"simulate", "roofline", "trace inspect", "trace synth", "sweep", "report"} <= commands
    assert len(EXAMPLES) >= 8, [e.id for e in EXAMPLES]


@pytest.mark.parametrize("example", PARAMS)
def test_a_documented_example_runs_as_shown(
    example: Example, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    for path in _inputs(list(example.argv)):  # copies: `report DIR` writes into DIR
        source, copy = ROOT / path, tmp_path / path
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, copy)
        else:
            shutil.copyfile(source, copy)
    # the width the pages were printed at
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    done = subprocess.run(
        [*budgettune_cmd, *example.argv], cwd=tmp_path, capture_output=True, text=True,
        timeout=600, env=env,
    )  # fmt: skip
    out = words(done.stdout + done.stderr)
    assert done.returncode == 0, out[-2000:]
    assert words(example.shown) in out, (example.shown, out[:2000])
