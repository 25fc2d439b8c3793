"""Session fixtures of the `sglang` tests: the SGLang venv, one tiny model, and one
`budgettune profile --engine sglang` run, which the profile test checks and the live and sweep
tests calibrate with (an SGLang start costs 40-70 s here: each is made once)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from sglang_env import (
    PROFILE_GRID,
    PROFILE_LIMIT_S,
    TINY_MODEL,
    ProfileRun,
    engine_cmd_text,
    engine_flag_args,
    env_args,
    on_client_core,
    sglang_python_or_skip,
)
from vllm_env import pids_marked


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
