"""vllm.yaml and sglang.args rendering."""

from __future__ import annotations

import shlex
from pathlib import Path

from budgettune.artifacts.engine_config import FixedSettings, write_engine_configs


def test_vllm_yaml_and_sglang_args(tmp_path: Path) -> None:
    vllm_path, sglang_path = write_engine_configs(
        tmp_path, budget_tokens=1024, max_num_seqs=128, model="/models/my model"
    )
    lines = [ln for ln in vllm_path.read_text().splitlines() if not ln.startswith("#")]
    assert lines == [
        'model: "/models/my model"',
        "enable-chunked-prefill: true",
        "max-num-batched-tokens: 1024",
        "max-num-seqs: 128",
    ]
    assert shlex.split(sglang_path.read_text()) == [
        "--model-path",
        "/models/my model",
        "--chunked-prefill-size",
        "1024",
        "--max-running-requests",
        "128",
    ]


def test_no_chunking_choice(tmp_path: Path) -> None:
    vllm_path, sglang_path = write_engine_configs(tmp_path, budget_tokens=None, max_num_seqs=64)
    assert "enable-chunked-prefill: false" in vllm_path.read_text()
    assert "max-num-batched-tokens" not in vllm_path.read_text()
    assert "--chunked-prefill-size -1" in sglang_path.read_text()


def test_configs_carry_what_else_the_sweep_fixed(tmp_path: Path) -> None:
    fixed = FixedSettings(
        max_model_len=8192, tensor_parallel_size=2, gpu_memory_utilization=0.85, dtype="bfloat16"
    )
    vllm_path, sglang_path = write_engine_configs(
        tmp_path, budget_tokens=32768, max_num_seqs=64, model="m", fixed=fixed
    )
    lines = vllm_path.read_text().splitlines()
    for line in ("max-model-len: 8192", "tensor-parallel-size: 2",
                 "gpu-memory-utilization: 0.85", 'dtype: "bfloat16"'):  # fmt: skip
        assert line in lines
    assert "prefix" not in vllm_path.read_text()
    args = shlex.split(sglang_path.read_text())
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs["--context-length"] == "8192" and pairs["--tp-size"] == "2"
    assert pairs["--mem-fraction-static"] == "0.85" and pairs["--dtype"] == "bfloat16"
    # above SGLang's 16384 prefill cap the cap is raised with the budget, as the sweep ran it
    assert pairs["--chunked-prefill-size"] == pairs["--max-prefill-tokens"] == "32768"
