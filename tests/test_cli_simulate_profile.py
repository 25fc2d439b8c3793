"""`budgettune simulate --profile FILE`: a shipped analytic profile reproduces its presets
exactly, a profile's fitted F drives prefill time, and a bad path is a one-line exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

PROFILE_8B = Path(__file__).resolve().parents[1] / "profiles" / "llama-3.1-8b_h100-sxm.json"
SMALL = ["--requests", "200", "--seed", "3", "--budgets", "256,2048,none", "--json"]


def simulate(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, "simulate", *args], capture_output=True, text=True, timeout=120)


def test_shipped_profile_matches_its_presets(budgettune_cmd: list[str]) -> None:
    by_presets = simulate(budgettune_cmd, *SMALL, "--model", "llama-3.1-8b", "--gpu", "h100-sxm")
    by_profile = simulate(budgettune_cmd, *SMALL, "--profile", str(PROFILE_8B))
    assert by_presets.returncode == 0, by_presets.stderr
    assert by_profile.returncode == 0, by_profile.stderr
    doc = json.loads(by_profile.stdout)
    assert [p["completed"] for p in doc["points"]] == [200, 200, 200]
    assert doc == json.loads(by_presets.stdout)


def test_halved_compute_doubles_prefill_ttft(budgettune_cmd: list[str], tmp_path: Path) -> None:
    data = json.loads(PROFILE_8B.read_text())
    data["step"]["flops_per_s"] /= 2
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(data))
    # Lone 8000-token prompts far apart: TTFT is one compute-bound prefill, t0 + 2*N*P/F
    # (plus attention; N without the embedding and LM head in the profile's engine accounting),
    # so halving F nearly doubles it; t0 = 0.5 ms and the weight read keep it just under 2.
    lone = ["--requests", "5", "--rate", "0.1", "--prompt-dist", "fixed:8000",
            "--output-dist", "fixed:2", "--budgets", "none", "--json"]  # fmt: skip
    fast_doc = json.loads(simulate(budgettune_cmd, *lone, "--profile", str(PROFILE_8B)).stdout)
    slow_run = simulate(budgettune_cmd, *lone, "--profile", str(slow))
    assert slow_run.returncode == 0, slow_run.stderr
    fast_ms = fast_doc["points"][0]["ttft_ms"]["p50"]
    slow_ms = json.loads(slow_run.stdout)["points"][0]["ttft_ms"]["p50"]
    # 2 * 8000 * 6.98e9 / 720e12 = 155 ms of matmuls alone at the measured calibration's F.
    assert fast_ms > 150
    assert 1.9 < slow_ms / fast_ms < 2.0


def test_profile_named_in_the_table_header(budgettune_cmd: list[str]) -> None:
    result = simulate(budgettune_cmd, "--requests", "50", "--budgets", "512", "--profile",
                      str(PROFILE_8B))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "from profile" in result.stdout and "llama-3.1-8b_h100-sxm.json" in result.stdout


def test_bad_profile_path_is_one_line_exit_2(budgettune_cmd: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    result = simulate(budgettune_cmd, "--profile", str(missing))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--profile" in lines[0] and "nope.json" in lines[0]
    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    result = simulate(budgettune_cmd, "--profile", str(garbage))
    assert result.returncode == 2 and "not valid JSON" in result.stderr


def test_a_profile_without_a_knee_is_not_called_a_ridge(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """A CPU profile's fitted F/B is no knee the measurements showed: the header says which."""
    data = json.loads(PROFILE_8B.read_text())
    data["ridge"].update(knee_found=False, knee_tokens=None, reason="one line fits as well")
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps(data))
    args = ["--requests", "50", "--budgets", "512"]
    with_knee = simulate(budgettune_cmd, *args, "--profile", str(PROFILE_8B))
    without = simulate(budgettune_cmd, *args, "--profile", str(flat))
    assert with_knee.returncode == 0 and without.returncode == 0, without.stderr
    header_with, header_without = (
        " ".join(run.stdout.split()).split("KV cache")[0] for run in (with_knee, without)
    )  # rich wraps the header at the terminal width
    from budgettune.model.profile import load_profile, profile_step_model

    ridge = f"{profile_step_model(load_profile(PROFILE_8B)).ridge_tokens:.0f}"
    assert header_with.endswith(f"ridge P* = {ridge} tokens; ")
    assert header_without.endswith(f"fitted F/B = {ridge} tokens (the profile found no knee); ")
