"""Shared test fixtures: paths to the repo and to ../shared, and the installed command."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"
AZURE_TRACE = SHARED / "traces" / "azure-llm-2023-conv.csv"


@pytest.fixture(scope="session")
def budgettune_cmd() -> list[str]:
    """The installed ``budgettune`` console command (next to this interpreter)."""
    candidate = Path(sys.executable).with_name("budgettune")
    if candidate.exists():
        return [str(candidate)]
    found = shutil.which("budgettune")
    assert found, "the budgettune command is not installed (pip install -e .)"
    return [found]
