"""`budgettune sweep --engine vllm|sglang` without --gpu detects the card with nvidia-smi, maps
it to a preset by name (or uses its memory), and says which card and which default-budget rule
applied. No GPU can run here: a fake `nvidia-smi` first on PATH stands in for the driver (the
one mock the suite allows), and the engine command does not exist, so nothing is launched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from budgettune.core import engine_defaults

pytestmark = pytest.mark.slow

FAKE_NVIDIA_SMI = """#!{python}
import sys
args = sys.argv[1:]
name, mib = {name!r}, {mib!r}
if name is None:
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
if "-L" in args:
    print(f"GPU 0: {{name}} (UUID: GPU-00000000)")
elif "--query-gpu=name,driver_version" in args:
    print(f"{{name}}, 550.54.15")
elif "--query-gpu=memory.total" in args:
    print(mib)
elif "--query-gpu=memory.used" in args:
    print(0)
"""

# The engine command does not exist, so vLLM cannot be asked: the table answers, and says so.
VLLM_RULE = f"vLLM could not be asked; {engine_defaults.VLLM_RULE}"
VLLM_CPU_RULE = f"vLLM could not be asked; {engine_defaults.VLLM_CPU_RULE}"
SGLANG_RULE = engine_defaults.SGLANG_RULE


@pytest.mark.parametrize(
    ("engine", "card", "mib", "described", "budget", "rule", "preset"),
    [
        ("vllm", "NVIDIA H100 80GB HBM3", 81559,
         "NVIDIA H100 80GB HBM3 (nvidia-smi, 79.6 GiB; preset h100-sxm)", 8192, VLLM_RULE,
         "h100-sxm"),
        ("vllm", "NVIDIA A100-SXM4-80GB", 81920,
         "NVIDIA A100-SXM4-80GB (nvidia-smi, 80.0 GiB; preset a100-80g)", 2048, VLLM_RULE,
         "a100-80g"),
        ("vllm", "NVIDIA L40S", 46068,
         "NVIDIA L40S (nvidia-smi, 45.0 GiB; preset l40s)", 2048, VLLM_RULE, "l40s"),
        # no preset by name: the memory still decides the default (96 GiB, not an A100)
        ("vllm", "NVIDIA RTX PRO 6000 Blackwell", 97887,
         "NVIDIA RTX PRO 6000 Blackwell (nvidia-smi, 95.6 GiB; no preset matches; --gpu names "
         "one for the predictions)", 8192, VLLM_RULE, None),
        ("vllm", "NVIDIA B200", 183359,
         "NVIDIA B200 (nvidia-smi, 179.1 GiB; preset b200)", 16384, VLLM_RULE, "b200"),
        ("sglang", "NVIDIA B200", 183359,
         "NVIDIA B200 (nvidia-smi, 179.1 GiB; preset b200)", 16384, SGLANG_RULE, "b200"),
        # SGLang 0.5.23: 4096 under 60 GiB (an older rule said 8192 from 35 GB)
        ("sglang", "NVIDIA A100-SXM4-40GB", 40960,
         "NVIDIA A100-SXM4-40GB (nvidia-smi, 40.0 GiB; preset a100-40g)", 4096, SGLANG_RULE,
         "a100-40g"),
        # no GPU: vLLM's CPU build
        ("vllm", None, None, "none visible (no nvidia-smi, or it lists no GPU)", 2048,
         VLLM_CPU_RULE, None),
    ],
    ids=["h100", "a100", "l40s", "unknown-96g", "vllm-b200", "sglang-b200", "sglang-a100-40g",
         "driver-fails"],
)  # fmt: skip
def test_detected_gpu_sets_the_engine_default(
    budgettune_cmd: list[str],
    tmp_path: Path,
    engine: str,
    card: str | None,
    mib: int | None,
    described: str,
    budget: int,
    rule: str,
    preset: str | None,
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(FAKE_NVIDIA_SMI.format(python=sys.executable, name=card, mib=mib))
    fake.chmod(0o755)
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", engine, "--model", "llama-3.1-8b",
         "--engine-cmd", str(tmp_path / "no-such-engine"), "--profile", "analytic",
         "--budgets", "512", "--requests", "10", "--slo-tbt", "50ms", "-o", str(run_dir)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # no engine could start: an engine failure
    said = " ".join(result.stderr.split())
    assert f"GPU: {described}; engine default budget {budget} ({rule})" in said, said
    # the analytic predictions run on the matched preset (the presets' default without one)
    assert f"analytic roofline of llama-3.1-8b on {preset or 'h100-sxm'}" in said
    if card is not None and preset is None:
        assert f"no GPU preset matches {card}, so h100-sxm's figures are used" in said
    doc = json.loads((run_dir / "recommendation.json").read_text())
    assert doc["engine"]["default_budget"] == budget
    assert {p["budget"]: p["role"] for p in doc["points"]} == {512: "candidate",
                                                               budget: "reference"}  # fmt: skip
    assert doc["hardware"]["gpu_detected"] == described
    assert doc["hardware"]["gpu"] == preset


def test_given_gpu_skips_detection(budgettune_cmd: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "vllm", "--model", "llama-3.1-8b",
         "--gpu", "a100-80g", "--engine-cmd", str(tmp_path / "no-such-engine"),
         "--profile", "analytic", "--budgets", "512", "--requests", "10", "--slo-tbt", "50ms",
         "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # no engine could start
    assert "GPU:" not in result.stderr
    doc = json.loads((tmp_path / "run" / "recommendation.json").read_text())
    assert doc["engine"]["default_budget"] == 2048  # the A100 rule, from the preset given
