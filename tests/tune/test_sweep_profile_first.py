"""`budgettune sweep --engine vllm` without --profile runs the profile step first, through the
installed command. The "vLLM" here is the embedded sim server behind vLLM's command line (a
script that passes vLLM's flags on, so every request is served in real time by the modeled H100):
a profile that stops early fails the sweep and keeps its partial measurements; --resume measures
it again, then the sweep runs on it; a second --resume reuses it. (With a baseline the profile
runs on the baseline's engine: test_sweep_profile_held.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_vllm import FAKE_VLLM  # this folder is on sys.path under pytest

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # measured TBT against the profile's prediction


def run_sweep(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, "sweep", *args], capture_output=True, text=True, timeout=600)


def test_real_engine_without_profile_profiles_first(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    script = tmp_path / "fake_vllm.py"
    script.write_text(textwrap.dedent(FAKE_VLLM))
    run_dir = tmp_path / "run"
    options = [
        "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
        "--engine-cmd", f"{sys.executable} {script}", "--max-num-seqs", "16",
        "--budgets", "512,1024", "--baseline", "none",
        "--prompt-dist", "lognormal:mean=600,sigma=0.5,max=2000", "--output-dist", "fixed:32",
        "--rate", "8", "--requests", "30", "--slo-tbt", "100ms", "--slo-ttft", "2s",
    ]  # fmt: skip

    # 1. The engine dies after 25 requests: the sweep stops with the profile's error, and the
    #    run folder holds the partial profile (and the sweep's settings, so --resume works).
    crashed = run_sweep(budgettune_cmd, *options, "--env", "FAKE_VLLM_CRASH_AFTER=25",
                        "-o", str(run_dir))  # fmt: skip
    assert crashed.returncode == 1, crashed.stderr[-3000:]
    err = " ".join(crashed.stderr.split())
    assert f"no --profile: profiling vllm first (prompts to 1024 tokens, decode batches to 16) " \
        f"into {run_dir / 'profile.json'}" in err  # fmt: skip
    error_lines = [line for line in crashed.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "profile stopped early" in error_lines[0], crashed.stderr
    assert "Traceback" not in crashed.stderr
    partial = json.loads((run_dir / "profile.json").read_text())
    assert partial["complete"] is False and partial["kind"] == "measured"
    assert 0 < len(partial["probes"]) < 25
    assert f"({len(partial['probes'])} probes) saved to {run_dir / 'profile.json'}" in err
    assert (run_dir / "sweep.json").is_file() and not (run_dir / "points.jsonl").exists()

    # 2. Resumed (the options come from the run folder; --env may change): a partial profile is
    #    measured again, then the sweep runs on it.
    resumed = run_sweep(budgettune_cmd, "--resume", str(run_dir), "--env",
                        "FAKE_VLLM_CRASH_AFTER=0")  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "profiling vllm first" in resumed.stderr
    profile = json.loads((run_dir / "profile.json").read_text())
    assert profile["complete"] is True and profile["kind"] == "measured"
    assert profile["engine"]["name"] == "vllm"
    assert {p["series"] for p in profile["probes"]} >= {"prefill", "decode", "mixed"}
    assert max(p["prompt_tokens"] for p in profile["probes"]) == 1024
    assert (run_dir / "profile.csv").is_file() and (run_dir / "profile.html").is_file()
    assert (run_dir / "engine-profile.log").is_file()
    doc = json.loads((run_dir / "recommendation.json").read_text())
    assert doc["model_source"] == f"calibrated profile {run_dir / 'profile.json'} (measured first)"
    assert doc["settings"]["profile"] == str(run_dir / "profile.json")
    # the measured model predicts the engine it was measured on: the simulated H100's p99 TBT
    for point in doc["points"]:
        measured_ms, predicted_ms = point["tbt_ms"], point["predicted"]["tbt_at_slo_ms"]
        assert abs(measured_ms / predicted_ms - 1) < 0.35, (point["budget"], measured_ms,
                                                             predicted_ms)  # fmt: skip

    # 3. Resumed again: the complete profile is reused, nothing is measured again.
    profile_mtime = (run_dir / "profile.json").stat().st_mtime_ns
    again = run_sweep(budgettune_cmd, "--resume", str(run_dir))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "profiling" not in again.stderr
    assert f"profile: reusing {run_dir / 'profile.json'}" in " ".join(again.stderr.split())
    assert (run_dir / "profile.json").stat().st_mtime_ns == profile_mtime
    assert json.loads((run_dir / "recommendation.json").read_text())["launches"] == 0


def test_analytic_and_external_say_where_predictions_come_from(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    # --profile analytic skips the profile step; the engine command is never reached for a
    # profile (it does not exist, so every launch fails and is recorded).
    result = run_sweep(
        budgettune_cmd, "--engine", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
        "--engine-cmd", str(tmp_path / "no-such-vllm"), "--profile", "analytic",
        "--budgets", "512", "--baseline", "none", "--requests", "10", "--slo-tbt", "50ms",
        "-o", str(tmp_path / "analytic"),
    )  # fmt: skip
    err = " ".join(result.stderr.split())
    assert "step-time model: analytic roofline of llama-3.1-8b on h100-sxm (--profile " \
        "analytic: presets, not measured)" in err, err  # fmt: skip
    assert "profiling" not in err and not (tmp_path / "analytic" / "profile.json").exists()
    assert result.returncode == 1  # nothing could be measured: an engine failure, not a verdict
    (line,) = (tmp_path / "analytic" / "points.jsonl").read_text().splitlines()
    point = json.loads(line)
    assert point["status"] == "engine_failed" and "no-such-vllm" in point["error"]
    # A server you run cannot be profiled without launching one: said plainly, analytic.
    external = run_sweep(
        budgettune_cmd, "--engine", "external", "--url", "http://127.0.0.1:9",
        "--model", "llama-3.1-8b", "--baseline", "512", "--requests", "10", "--slo-tbt", "50ms",
        "-o", str(tmp_path / "external"),
    )  # fmt: skip
    said = " ".join(external.stderr.split())
    assert (
        "step-time model: analytic roofline of llama-3.1-8b on h100-sxm: predictions are "
        "analytic (presets, not measured); a server you run cannot be profiled"
    ) in said, said
    assert "profiling" not in said and not (tmp_path / "external" / "profile.json").exists()
