"""Shared test fixtures: the repo, the slice of the public Azure trace under tests/data, and the
installed command."""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

import pytest

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
