"""Shared fixture of the report tests: one real sweep on the embedded engine, run once per
session through the installed command, whose run folder several tests render."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

SWEEP_ARGS = (
    "--engine", "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
    "--prompt-dist", "lognormal:mean=1500,sigma=0.5,max=6000",
    "--output-dist", "lognormal:mean=64,sigma=0.5,max=256",
    "--rate", "16", "--requests", "60", "--seed", "0",
    "--slo-tbt", "44ms", "--slo-ttft", "1s", "--budgets", "512,1024,1536,2048",
)  # fmt: skip


@pytest.fixture(scope="session")
def sweep_run(tmp_path_factory: pytest.TempPathFactory, budgettune_cmd: list[str]) -> Path:
    """The run folder of a finished embedded-engine sweep (about 15 s on 2 busy cores)."""
    run_dir = tmp_path_factory.mktemp("sweep") / "run"
    done = subprocess.run(
        [*budgettune_cmd, "sweep", *SWEEP_ARGS, "-o", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run_dir / "recommendation.json").is_file()
    return run_dir
