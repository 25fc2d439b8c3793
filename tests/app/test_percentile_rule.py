"""One --percentile rule in every command that judges SLOs (core.slo.check_percentile): at least
50 and below 100, refused with the same line before anything starts or is written."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

SIM_RESULTS = {"kind": "simulate", "points": []}

COMMANDS = {
    "sweep": ["sweep", "--engine", "sim", "--slo-tbt", "50ms", "-o", "{tmp}/run"],
    "replay": ["replay", "--engine", "sim", "--slo-tbt", "50ms", "-o", "{tmp}/run"],
    "report": ["report", "{tmp}/sim.json"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("percentile", ["30", "49.9", "100"])
def test_every_command_refuses_the_same_percentiles(
    command: str, percentile: str, tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    (tmp_path / "sim.json").write_text(json.dumps(SIM_RESULTS))
    argv = [arg.format(tmp=tmp_path) for arg in COMMANDS[command]]
    done = subprocess.run(
        [*budgettune_cmd, *argv, "--percentile", percentile],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"--percentile: must be in [50, 100), got {float(percentile):g}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "report.html").exists()
