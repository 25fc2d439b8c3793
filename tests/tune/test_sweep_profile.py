"""`budgettune sweep --engine sim --profile FILE`: the launched sim engine runs the profile's
calibrated model, so measured latencies track the predictions made from the same profile."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # measured latencies against predictions

PROFILE_8B = Path(__file__).resolve().parents[2] / "profiles" / "llama-3.1-8b_h100-sxm.json"


def sweep_on_profile(
    cmd: list[str], profile: Path, run_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """A short sweep on the embedded engine running ``profile`` (8 requests of 200 + 8 tokens,
    a 200 ms TBT SLO), into ``run_dir``; it must succeed."""
    result = subprocess.run(
        [*cmd, "sweep", "--engine", "sim", "--profile", str(profile),
         "--prompt-dist", "fixed:200", "--output-dist", "fixed:8", "--requests", "8",
         "--slo-tbt", "200ms", *args, "-o", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result


def test_sim_engine_runs_the_sweeps_profile(budgettune_cmd: list[str], tmp_path: Path) -> None:
    data = json.loads(PROFILE_8B.read_text())
    data["step"]["overhead_s"] = 0.040  # 80x the preset t0: presets would give ~8 ms gaps
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(data))
    run_dir = tmp_path / "run"
    sweep_on_profile(budgettune_cmd, slow, run_dir, "--rate", "2", "--budgets", "512")
    logs = sorted(run_dir.glob("engine-*.log"))
    assert logs
    for log in logs:
        assert f"step model from profile {slow}" in log.read_text()
    for line in (run_dir / "points.jsonl").read_text().splitlines():
        point = json.loads(line)
        measured_ms = point["measured"]["tbt_ms"]["p50"]
        predicted_ms = point["predicted"]["tbt_ms"]["p50"]
        # Engine and prediction share t0 = 40 ms + ~8 ms of decode; presets would give ~6.5 ms.
        assert measured_ms > 40 and predicted_ms > 40
        assert abs(measured_ms / predicted_ms - 1) < 0.2, (measured_ms, predicted_ms)


def test_a_profile_without_a_knee_is_not_shown_as_a_ridge(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    data = json.loads(PROFILE_8B.read_text())
    data["ridge"]["knee_found"] = False
    flat = tmp_path / "no-knee.json"
    flat.write_text(json.dumps(data))
    run_dir = tmp_path / "run"
    result = sweep_on_profile(budgettune_cmd, flat, run_dir, "--rate", "4", "--baseline", "none")
    said = " ".join(result.stderr.split())
    assert "(no ridge: the profile found no knee, so the floor is the fitted model's" in said
    assert "ridge 3" not in said  # the fitted F / B (325 tokens) is not printed as the ridge
    doc = json.loads((run_dir / "recommendation.json").read_text())
    assert doc["candidates"]["knee_found"] is False
    page = (run_dir / "report.html").read_text()
    assert "no ridge: the profile found no knee" in page
