"""Session fixtures of the real-engine tests: for SGLang its venv, one tiny model, and one
`budgettune profile --engine sglang` run, which the profile test checks and the live and sweep
tests calibrate with (an SGLang start costs 40-70 s here: each is made once); for vLLM one
`budgettune profile --engine vllm` run, which test_vllm_profile checks and test_vllm_sweep
calibrates with (the sweep's own profile step is tested on the embedded engine,
tests/tune/test_sweep_profile_first.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from sglang_env import (
    PROFILE_GRID,
    TINY_MODEL,
    ProfileRun,
    engine_cmd_text,
    engine_flag_args,
    env_args,
    sglang_python_or_skip,
)
from vllm_env import (
    GRID_ARGS,
    PROFILE_LIMIT_S,
    VllmRun,
    build_model,
    on_client_core,
    pids_marked,
    vllm_python_or_skip,
)
from vllm_env import engine_cmd_text as vllm_engine_cmd_text
from vllm_env import engine_flag_args as vllm_engine_flag_args
from vllm_env import env_args as vllm_env_args


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    return sglang_python_or_skip()


@pytest.fixture(scope="session")
def sglang_model(
    sglang_python: Path, budgettune_cmd: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """budgettune's tiny Llama (sglang_env.TINY_MODEL says which and why)."""
    out = tmp_path_factory.mktemp("sglang-tiny") / "model"
    done = subprocess.run(
        [*budgettune_cmd, "tiny-model", str(out), *TINY_MODEL],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def sglang_profile(
    sglang_python: Path,
    sglang_model: Path,
    budgettune_cmd: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> ProfileRun:
    folder = tmp_path_factory.mktemp("sglang-profile")
    out = folder / "sglang-cpu.json"
    mark = f"profile-{uuid.uuid4().hex[:8]}"
    cmd = on_client_core([
        *budgettune_cmd, "profile", "--engine", "sglang",
        "--engine-cmd", engine_cmd_text(sglang_python), *engine_flag_args(),
        "--model", str(sglang_model), "--dtype", "float32", *PROFILE_GRID, *env_args(mark),
        "-o", str(out), "--json",
    ])  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=PROFILE_LIMIT_S + 120)
    wall_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    deadline = time.monotonic() + 15  # the engine is stopped before the command returns
    while pids_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pids_marked(mark), "SGLang processes outlived the profile"
    return ProfileRun(out, json.loads(out.read_text()), json.loads(done.stdout), wall_s)


@pytest.fixture(scope="session")
def vllm_profile(budgettune_cmd: list[str], tmp_path_factory: pytest.TempPathFactory) -> VllmRun:
    """`budgettune profile --engine vllm` with the CPU recipe of vllm_env.vllm_spec (eager, fp32,
    a 1 GB KV cache, no hub, a private compile cache) and the probe grid GRID_ARGS. Eager as the
    sweep test it calibrates: a compiled profile predicted a p99 TBT of 5.3 ms where the eager
    sweep measured 12.8 ms, and its start cost 30-45 s more."""
    python = vllm_python_or_skip()
    folder = tmp_path_factory.mktemp("vllm-profile")
    model = build_model(python, folder / "tiny")
    mark = f"profile-{uuid.uuid4().hex[:8]}"
    out = folder / "vllm-cpu.json"
    cmd = on_client_core([
        *budgettune_cmd, "profile", "--engine", "vllm",
        "--engine-cmd", vllm_engine_cmd_text(python), "--model", str(model),
        "--dtype", "float32", *GRID_ARGS, *vllm_env_args(folder / "cache", mark),
        *vllm_engine_flag_args(),
        "-o", str(out), "--json",
    ])  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=PROFILE_LIMIT_S + 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    wall_s = time.monotonic() - started
    assert proc.returncode == 0, stderr[-3000:]
    deadline = time.monotonic() + 15  # the engine is stopped by PID before the command returns
    while pids_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pids_marked(mark), "vLLM processes outlived the profile"
    return VllmRun(folder, model, out, wall_s, json.loads(stdout), json.loads(out.read_text()))
