"""The sequential sweep that the search, parallel and Ray tests each compare with: run once per
session (its sweeps on the embedded engine are the tier's slow part)."""

from __future__ import annotations

import subprocess

import pytest
from rising_tbt import SEARCH, SweepRun  # this folder is on sys.path under pytest


@pytest.fixture(scope="session")
def sequential_search(
    budgettune_cmd: list[str], tmp_path_factory: pytest.TempPathFactory
) -> SweepRun:
    """`budgettune sweep` of rising_tbt.SEARCH, one engine at a time, as a user runs it."""
    run_dir = tmp_path_factory.mktemp("sequential-search") / "run"
    done = subprocess.run(
        [*budgettune_cmd, "sweep", *SEARCH, "-o", str(run_dir)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return SweepRun(done, run_dir)
