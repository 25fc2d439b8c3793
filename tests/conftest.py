"""Shared test fixtures: the repo, the slice of the public Azure trace under tests/data, and the
installed command."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from budgettune.engines.process import LAUNCH_LOG_VAR

# A suite started as a background job (CI scripts, `cmd &`) inherits SIGINT *ignored*, and an
# ignored signal stays ignored in every child: the tests that press Ctrl-C on a budgettune or
# engine subprocess would then test nothing. A handler (unlike SIG_IGN) is reset to the default
# in exec'd children, so installing Python's own here gives every child a working Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO_ROOT = Path(__file__).resolve().parents[1]
# 1,100 consecutive rows of the Azure LLM inference trace 2023 (conversation), CC-BY 4.0:
# what they are, and the attribution, in tests/data/README.md.
AZURE_SLICE = REPO_ROOT / "tests" / "data" / "azure-llm-2023-conv-slice.csv"


@pytest.fixture(scope="session", autouse=True)
def wide_console() -> Iterator[None]:
    """budgettune prints through rich, which wraps at 80 columns when its output is not a
    terminal and folds a word longer than a line. Under an xdist worker a test folder's path
    (/tmp/pytest-of-USER/pytest-N/popen-gwN/<up to 30 characters>/run/profile.json) passes 80,
    so a test looking for that path in a command's output passed on one machine and failed on
    CI's. A wide console, for every command the tests run, prints each path whole; a test about
    wrapping sets COLUMNS itself. (Session-wide but not module-wide: pytest's own summary keeps
    the terminal's width.)"""
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "400"
    yield
    if before is None:
        del os.environ["COLUMNS"]
    else:
        os.environ["COLUMNS"] = before


@pytest.fixture(scope="session")
def azure_slice() -> Path:
    """The shipped slice of the real Azure 2023 conversation trace (tests/data/README.md)."""
    assert AZURE_SLICE.is_file(), f"{AZURE_SLICE} is missing: it ships with the repository"
    return AZURE_SLICE


@pytest.fixture(scope="session")
def budgettune_cmd() -> list[str]:
    """The installed ``budgettune`` console command (next to this interpreter)."""
    candidate = Path(sys.executable).with_name("budgettune")
    if candidate.exists():
        return [str(candidate)]
    found = shutil.which("budgettune")
    assert found, "the budgettune command is not installed (pip install -e .)"
    return [found]


# What the run's engine starts cost: budgettune appends a line per start to $BUDGETTUNE_LAUNCH_LOG
# (engines/process.note_launch), in this process, its xdist workers and every budgettune command a
# test runs (they inherit the variable), and the summary counts them.
def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.environ.get(LAUNCH_LOG_VAR):
        return  # an xdist worker (its controller counts), or a log someone else reads
    handle, path = tempfile.mkstemp(prefix="budgettune-launches-", suffix=".jsonl")
    os.close(handle)
    os.environ[LAUNCH_LOG_VAR] = path
    config.stash[LAUNCH_LOG_KEY] = Path(path)


LAUNCH_LOG_KEY = pytest.StashKey[Path]()


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    path = config.stash.get(LAUNCH_LOG_KEY, None)
    if path is None:
        return
    try:
        starts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    finally:
        path.unlink(missing_ok=True)
    by_engine = Counter(start["engine"] for start in starts)
    ready = [start["ready_s"] for start in starts if start["ready_s"] is not None]
    kinds = ", ".join(f"{engine} {count}" for engine, count in sorted(by_engine.items()))
    terminalreporter.write_line(
        f"engine starts: {len(starts)} ({kinds or 'none'}), {sum(ready):.0f} s from launch to ready"
        + (f"; {len(starts) - len(ready)} never ready" if len(ready) < len(starts) else "")
    )
