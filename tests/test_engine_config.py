"""vllm.yaml and sglang.args rendering: the budget and only what the user set."""

from __future__ import annotations

import shlex
from pathlib import Path

from budgettune.artifacts.engine_config import FixedSettings, write_engine_config


def body(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


def test_the_budget_alone_when_the_user_set_nothing_else(tmp_path: Path) -> None:
    path = write_engine_config(tmp_path, engine="vllm", budget_tokens=1024, model="/m/my model")
    assert path.name == "vllm.yaml"
    assert body(path) == ['model: "/m/my model"', "max-num-batched-tokens: 1024"]
    path = write_engine_config(tmp_path, engine="sglang", budget_tokens=1024, model="/m/my model")
    assert path.name == "sglang.args"
    assert shlex.split(path.read_text()) == [
        "--model-path", "/m/my model", "--chunked-prefill-size", "1024",
    ]  # fmt: skip
    # The simulated engine schedules by vLLM's rules: its sweeps write vLLM's file.
    assert write_engine_config(tmp_path, engine="sim", budget_tokens=512).name == "vllm.yaml"


def test_what_the_user_set_is_carried(tmp_path: Path) -> None:
    fixed = FixedSettings(max_num_seqs=96)
    vllm = write_engine_config(tmp_path, engine="vllm", budget_tokens=2048, fixed=fixed)
    assert body(vllm) == ["max-num-batched-tokens: 2048", "max-num-seqs: 96"]
    sglang = write_engine_config(tmp_path, engine="sglang", budget_tokens=2048, fixed=fixed)
    assert shlex.split(sglang.read_text())[-2:] == ["--max-running-requests", "96"]


def test_no_chunking_choice(tmp_path: Path) -> None:
    vllm = write_engine_config(tmp_path, engine="vllm", budget_tokens=None)
    assert body(vllm) == ["enable-chunked-prefill: false"]
    sglang = write_engine_config(tmp_path, engine="sglang", budget_tokens=None)
    assert "--chunked-prefill-size -1" in sglang.read_text()


def test_configs_carry_what_else_the_user_fixed(tmp_path: Path) -> None:
    fixed = FixedSettings(
        max_model_len=8192, tensor_parallel_size=2, gpu_memory_utilization=0.85, dtype="bfloat16"
    )
    vllm = write_engine_config(tmp_path, engine="vllm", budget_tokens=32768, model="m", fixed=fixed)
    lines = vllm.read_text().splitlines()
    for line in ("max-model-len: 8192", "tensor-parallel-size: 2",
                 "gpu-memory-utilization: 0.85", 'dtype: "bfloat16"'):  # fmt: skip
        assert line in lines
    assert "prefix" not in vllm.read_text() and "max-num-seqs" not in vllm.read_text()
    sglang = write_engine_config(
        tmp_path, engine="sglang", budget_tokens=32768, model="m", fixed=fixed
    )
    args = shlex.split(sglang.read_text())
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    assert pairs["--context-length"] == "8192" and pairs["--tp-size"] == "2"
    assert pairs["--mem-fraction-static"] == "0.85" and pairs["--dtype"] == "bfloat16"
    # above 16384 --max-prefill-tokens is raised with the budget, as the sweep ran it
    assert pairs["--chunked-prefill-size"] == pairs["--max-prefill-tokens"] == "32768"
