"""The sim engine with ``--profile FILE``: the banner names the profile, its iterations follow
the profile's calibrated step model (seen in /metrics), and `budgettune serve --profile` serves
it; a bad profile path stops the server with a one-line error, exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from budgettune.engines.process import free_port, group_members
from budgettune.loadgen.server_metrics import parse_prometheus
from budgettune.model.profile import load_profile, profile_step_model

SimStart = Callable[[list[str]], AbstractContextManager[tuple[str, "subprocess.Popen[bytes]"]]]
PROFILE_8B = Path(__file__).resolve().parents[2] / "profiles" / "llama-3.1-8b_h100-sxm.json"
SLOW_T0_S = 0.040  # far above the preset 0.5 ms, so the profile's model is unmistakable


def _slow_profile(tmp_path: Path) -> Path:
    data = json.loads(PROFILE_8B.read_text())
    data["step"]["overhead_s"] = SLOW_T0_S
    path = tmp_path / "slow-t0.json"
    path.write_text(json.dumps(data))
    return path


def _mean_gap_s(url: str, tokens: int) -> float:
    body = {"prompt": [7] * 30, "max_tokens": tokens, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        for _ in response.iter_lines():
            pass
    itl = parse_prometheus(httpx.get(f"{url}/metrics").text).histograms[
        "vllm:inter_token_latency_seconds"
    ]
    assert itl.count == tokens - 1
    return itl.total / itl.count


@pytest.mark.timing
def test_iterations_follow_the_profile(sim_factory: SimStart, tmp_path: Path) -> None:
    slow = _slow_profile(tmp_path)
    model = profile_step_model(load_profile(slow))
    # One decode at context ~35: t0 plus the weight read at the profile's bandwidth.
    expected_s = model.iteration_time_s((), (35,))
    assert expected_s > SLOW_T0_S
    with sim_factory(["--profile", str(slow), "--max-num-batched-tokens", "512"]) as (url, _):
        gap_s = _mean_gap_s(url, 11)
    banner = (tmp_path / "sim-0.log").read_text()
    assert f"step model from profile {slow}" in banner
    # Real-time pacing: never faster than modeled (the presets would give ~8 ms); late by a
    # loaded machine's jitter (1.5x was exceeded once at load average ~9 on 2 cores).
    assert expected_s * 0.95 < gap_s < expected_s * 2.5, (gap_s, expected_s)
    with sim_factory(["--max-num-batched-tokens", "512"]) as (url, _):
        preset_gap_s = _mean_gap_s(url, 11)
    # The presets' t0 is 0.5 ms: the profile made the difference.
    assert preset_gap_s < SLOW_T0_S, preset_gap_s


def test_sim_server_bad_profile_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "budgettune.engines.embedded", "--profile", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--profile" in result.stderr


@pytest.mark.timing
def test_serve_command_reports_the_profile(budgettune_cmd: list[str], tmp_path: Path) -> None:
    slow = _slow_profile(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*budgettune_cmd, "serve", "--profile", str(slow), "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while "serving on" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        gap_s = _mean_gap_s(url, 6)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(10)
        assert not group_members(proc.pid)
    text = log.read_text()
    # whitespace aside: the console folds a long path at any character, not only at spaces
    assert f"stepmodelfromprofile{slow}" in "".join(text.split())
    assert gap_s > SLOW_T0_S


def test_serve_bad_profile_is_one_line_exit_2(budgettune_cmd: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [*budgettune_cmd, "serve", "--profile", str(tmp_path / "missing.json"), "--port", "0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "missing.json" in lines[0]
