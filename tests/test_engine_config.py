"""vllm.yaml and sglang.args rendering."""

from __future__ import annotations

import shlex
from pathlib import Path

from budgettune.report.engine_config import write_engine_configs


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
