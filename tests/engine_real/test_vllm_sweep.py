"""`budgettune sweep` against the real vLLM CPU build, through the installed command: calibrated
by the session's vLLM profile (conftest.vllm_profile; the sweep's own profile step is tested on
the embedded engine), it takes its baseline from the installed vLLM's own defaults, then writes
a vllm.yaml that `vllm serve --config` reads (vLLM's own parser and engine configuration take
the budget and the seqs from it) and that carries the budget and only what the user set. Two vLLM
starts: one per budget."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from vllm_env import (
    ENGINE_FLAGS,
    VllmRun,
    cpu_env,
    engine_cmd_text,
    engine_flag_args,
    env_args,
    on_client_core,
    pids_marked,
    resolve_serve_args,
    vllm_python_or_skip,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def write_trace(path: Path) -> None:
    """Two decoders with long outputs, then a long prompt while they decode; three times."""
    rows = []
    for episode in range(3):
        start = episode * 2.0
        rows += [
            {"arrival_s": start, "prompt_tokens": 64, "output_tokens": 200},
            {"arrival_s": start + 0.02, "prompt_tokens": 64, "output_tokens": 200},
            {"arrival_s": start + 0.3, "prompt_tokens": 1500, "output_tokens": 4},
        ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_sweep_on_vllm_writes_a_config_vllm_serves(
    vllm_profile: VllmRun, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    python = vllm_python_or_skip()
    model = vllm_profile.model
    trace = tmp_path / "trace.jsonl"
    write_trace(trace)
    run_dir = tmp_path / "run"
    mark = f"sweep-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    result = subprocess.run(
        on_client_core([
            *budgettune_cmd, "sweep", "--engine", "vllm",
            "--engine-cmd", engine_cmd_text(python), *engine_flag_args(), "--model", str(model),
            "--dtype", "float32", *env_args(tmp_path / "cache", mark), "--max-num-seqs", "16",
            "--profile", str(vllm_profile.path),
            # 2048 is the CPU build's default budget: the baseline costs no extra launch
            "--budgets", "256,2048", "--trace", str(trace),
            # SLOs a CPU meets at both budgets: this test is about the config, not the verdict
            "--slo-tbt", "2s", "--slo-ttft", "30s", "--health-timeout", "5m", "-o", str(run_dir),
        ]),
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    sweep_s = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "engine vllm (as asked)" in result.stderr
    err = " ".join(result.stderr.split())
    # The model folder holds its tokenizer: prompts go as text of exactly the scheduled tokens,
    # and vLLM's own usage.prompt_tokens says every one of them was as long as scheduled.
    assert f"prompts: text of exactly the scheduled tokens on {model}/tokenizer.json" in err, err
    for line in (run_dir / "points.jsonl").read_text().splitlines():
        check = json.loads(line)["selfcheck"]
        assert check["prompt_form"] == "text", check
        assert check["prompt_tokens"]["checked"] >= 9 and check["prompt_tokens"]["off"] == 0
    assert not (run_dir / "profile.json").exists()  # --profile given: no profile step
    doc = json.loads((run_dir / "recommendation.json").read_text())
    assert doc["model_source"].startswith(f"calibrated profile {vllm_profile.path}"), doc
    assert doc["budget"] == 2048
    # The baseline is the installed vLLM's own answer (its CPU build: 2048 tokens, 128 seqs).
    defaults = doc["engine"]["defaults"]
    assert (
        defaults["source"].startswith("asked vLLM 0.")
        and "get_batch_defaults" in defaults["source"]
    )
    assert doc["engine"]["default_budget"] == defaults["budget_tokens"] == 2048, doc["engine"]
    assert defaults["max_num_seqs"] == 128
    assert "engine default budget 2048 (asked vLLM" in err, err
    point = doc["points"][-1]
    assert point["engine"]["name"] == "vllm" and point["engine"]["version"]
    assert point["measured"]["failed"] == 0
    # every replay of the budget completed its 9 requests (a marginal or lagging one is replayed)
    assert point["measured"]["completed"] == 9 * point["replays"]
    # issue 14: each measured point carries its 95% intervals, holding the estimate, and how
    # sure its verdict is; with SLOs this loose every verdict is a clear pass
    for measured in doc["points"]:
        at = measured["measured"]
        for metric in ("tbt", "ttft"):
            low, high = at[f"{metric}_at_slo_ci_ms"]
            assert low <= at[f"{metric}_at_slo_ms"] <= high, (metric, at)
        assert measured["confidence"] == "clear" and measured["replays"] >= 1, measured
    assert not pids_marked(mark), "a vLLM process outlived the sweep"
    # The budget, and only what the test set (--max-num-seqs, --dtype, the recipe's --engine-arg
    # flags); no SGLang file for a sweep measured on vLLM.
    yaml_lines = [
        ln for ln in (run_dir / "vllm.yaml").read_text().splitlines() if not ln.startswith("#")
    ]
    assert sorted(yaml_lines) == sorted([
        f'model: "{model}"', "max-num-batched-tokens: 2048", "max-num-seqs: 16", 'dtype: "float32"',
        *(f"{flag[2:]}: true" for flag in ENGINE_FLAGS),
    ]), yaml_lines  # fmt: skip
    assert not (run_dir / "sglang.args").exists()

    # The written config is what the user runs: vLLM's own `vllm serve` parsing and engine
    # configuration must take the budget and the seqs from it (the sweep's two starts already
    # showed this vLLM serving with those settings; a third start would only repeat that).
    read = resolve_serve_args(
        python,
        ["--config", str(run_dir / "vllm.yaml")],  # the recipe's flags are in the file now
        cpu_env(tmp_path / "cache", mark),
    )
    print(f"vllm serve --config vllm.yaml reads {read}")
    # 2048 is also the CPU build's default: "given" shows it came from the file
    assert read["given"]["max_num_batched_tokens"] == 2048, read
    assert read["given"]["model"] == str(model), read
    assert read["given"]["enforce_eager"] is True, read  # the recipe's --engine-arg, from the file
    assert read["resolved"] == {
        "model": str(model), "max_num_batched_tokens": 2048, "max_num_seqs": 16,
        "dtype": "torch.float32",
    }, read  # fmt: skip
    assert not pids_marked(mark)
    print(f"sweep on vLLM CPU: {sweep_s:.0f} s; p99 TBT {point['tbt_ms']:.1f} ms (predicted "
          f"{point['predicted']['tbt_at_slo_ms']:.1f}), p99 TTFT {point['ttft_ms']:.0f} ms at "
          "budget 2048")  # fmt: skip
