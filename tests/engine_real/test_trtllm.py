"""TensorRT-LLM (``trtllm-serve``) without the real server, which needs an NVIDIA GPU: the launch
command, the options file budgettune writes for each launch, the sweep's trtllm.yaml, the
metrics path and names, and the failure messages, against a stand-in that parses trtllm-serve's
options and answers like it (standin.py)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from standin import write_standin
from vllm_env import MARK_VAR, pids_marked

from budgettune.app.replay import ReplayConfig, run_replay
from budgettune.artifacts.engine_config import FixedSettings, write_engine_config
from budgettune.core.engine_defaults import default_budget
from budgettune.core.errors import EngineError, UserError
from budgettune.engines.base import LaunchSpec
from budgettune.engines.registry import get_engine
from budgettune.engines.trtllm import (
    TrtllmEngine,
    options_settings,
    options_yaml,
    trtllm_command,
)
from budgettune.loadgen.runner import RunOptions
from budgettune.trace.schedule import Schedule

OPTIONS = Path("/run/engine-2048.trtllm.yaml")


def test_command_full() -> None:
    spec = LaunchSpec(
        budget_tokens=2048, max_num_seqs=64, model="meta-llama/Llama-3.1-8B", max_model_len=8192,
        tensor_parallel_size=2, gpu_memory_utilization=0.85, dtype="bfloat16",
        extra_args=("--backend", "pytorch"),
    )  # fmt: skip
    assert trtllm_command(spec, 8123, OPTIONS) == [
        "trtllm-serve", "meta-llama/Llama-3.1-8B", "--host", "127.0.0.1", "--port", "8123",
        "--max_num_tokens", "2048", "--enable_chunked_prefill", "--max_batch_size", "64",
        "--max_seq_len", "8192", "--tp_size", "2", "--kv_cache_free_gpu_memory_fraction", "0.85",
        "--config", str(OPTIONS), "--backend", "pytorch",
    ]  # fmt: skip


def test_command_baseline_and_no_chunking() -> None:
    # The engine's default: no budget flag, chunking left as trtllm-serve leaves it (off).
    default = trtllm_command(LaunchSpec(model="/m"), 1, OPTIONS)
    assert "--max_num_tokens" not in default and "--enable_chunked_prefill" not in default
    no_chunks = LaunchSpec(model="/m", budget_tokens=4096, chunked_prefill=False)
    off = trtllm_command(no_chunks, 1, OPTIONS)
    assert off[off.index("--max_num_tokens") + 1] == "4096"
    assert "--enable_chunked_prefill" not in off


@pytest.mark.parametrize(
    "flag", ["--max_num_tokens", "--max-num-tokens", "--enable_chunked_prefill", "--tp_size",
             "--free_gpu_memory_fraction", "--extra_llm_api_options", "--config", "--port"],
)  # fmt: skip
def test_refuses_managed_passthrough(flag: str) -> None:
    spec = LaunchSpec(model="/m", extra_args=(flag, "4"))
    with pytest.raises(UserError, match=rf"^engine_arg: {flag}.* (is set by budgettune|refused)"):
        trtllm_command(spec, 1, OPTIONS)


def test_model_required_and_registry() -> None:
    with pytest.raises(UserError, match=r"^model: the TensorRT-LLM engine needs a model"):
        trtllm_command(LaunchSpec(), 1, OPTIONS)
    assert isinstance(get_engine("TRTLLM"), TrtllmEngine)


def test_options_file_carries_what_trtllm_serve_has_no_flag_for() -> None:
    text = options_yaml(options_settings(LaunchSpec(model="/m", dtype="bfloat16",
                                                    gpu_memory_utilization=0.8)))  # fmt: skip
    assert yaml.safe_load(text) == {
        # The file's kv_cache_config replaces the flags' one: the fraction is kept in it.
        "kv_cache_config": {"enable_block_reuse": False, "free_gpu_memory_fraction": 0.8},
        "return_perf_metrics": True,  # registers /prometheus/metrics
        "dtype": "bfloat16",
    }
    cached = yaml.safe_load(options_yaml(options_settings(LaunchSpec(prefix_caching=True))))
    assert cached == {"kv_cache_config": {"enable_block_reuse": True}, "return_perf_metrics": True}


def test_default_budget_rule() -> None:
    found = default_budget("trtllm", "H100", 80 * 1024**3)
    assert (found.budget_tokens, found.max_num_seqs) == (8192, None)
    assert "chunked prefill off" in found.rule


def test_sweep_config_file(tmp_path: Path) -> None:
    path = write_engine_config(
        tmp_path, engine="trtllm", budget_tokens=1536, model="meta-llama/Llama-3.1-8B",
        fixed=FixedSettings(max_num_seqs=96, gpu_memory_utilization=0.9, dtype="float16"),
    )  # fmt: skip
    assert path.name == "trtllm.yaml"
    text = path.read_text()
    assert text.startswith(
        "# Written by budgettune: pass to `trtllm-serve meta-llama/Llama-3.1-8B --config "
        "trtllm.yaml`"
    )
    assert yaml.safe_load(text) == {
        "max_num_tokens": 1536, "enable_chunked_prefill": True, "max_batch_size": 96,
        "kv_cache_config": {"free_gpu_memory_fraction": 0.9}, "dtype": "float16",
    }  # fmt: skip
    off = write_engine_config(tmp_path, engine="trtllm", budget_tokens=None)
    assert yaml.safe_load(off.read_text()) == {"enable_chunked_prefill": False}


def _spec(tmp_path: Path, **changes: object) -> LaunchSpec:
    script = write_standin(tmp_path)
    env = {
        "STANDIN_FLAVOR": "trtllm",
        "STANDIN_RECORD": str(tmp_path / "record.json"),
        MARK_VAR: str(tmp_path),  # the whole path: unique across xdist workers
    }
    env.update(changes.pop("env", {}))  # type: ignore[call-overload]
    fields: dict[str, object] = dict(
        budget_tokens=256, max_num_seqs=4, model=str(tmp_path / "model"), dtype="float16",
        engine_cmd=(sys.executable, str(script)), env=env,
        log_path=tmp_path / "run" / "engine-256.log", health_timeout_s=20, stop_grace_s=2,
    )  # fmt: skip
    fields.update(changes)
    return LaunchSpec(**fields)  # type: ignore[arg-type]


def test_standin_replay_reads_trtllm_metrics_and_options(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    schedule = Schedule(np.array([0.0, 0.01, 0.02]), np.array([8, 9, 10]), np.array([5, 6, 7]))
    config = ReplayConfig(
        engine="trtllm", spec=spec, run=RunOptions(request_timeout_s=30.0),
        traffic="stand-in", output_dir=tmp_path / "run",
    )  # fmt: skip
    result = asyncio.run(run_replay(config, schedule))
    assert result.complete and result.summary.completed == 3
    recorded = json.loads((tmp_path / "record.json").read_text())
    # The server got exactly the command budgettune recorded, options file included.
    port = int(result.engine.url.rsplit(":", 1)[1])
    options = tmp_path / "run" / "engine-256.trtllm.yaml"
    assert list(result.engine.command) == trtllm_command(spec, port, options)
    assert recorded["argv"] == list(result.engine.command)[2:]
    assert yaml.safe_load(recorded["options"]) == yaml.safe_load(options.read_text()) == {
        "kv_cache_config": {"enable_block_reuse": False}, "return_perf_metrics": True,
        "dtype": "float16",
    }  # fmt: skip
    assert result.engine.version == "9.9.9-standin"  # its /version
    # Its Prometheus text is at /prometheus/metrics, under trtllm_ names; /metrics is JSON.
    assert result.server.ttft is not None
    assert result.server.ttft.metric == "trtllm_time_to_first_token_seconds"
    assert result.server.itl is None  # trtllm_time_per_output_token_seconds is a TPOT
    # Grown over the run (the readiness request came before the first scrape).
    assert result.server.counters["requests_total"] == 3
    assert result.server.counters["generation_tokens_total"] == 5 + 6 + 7
    assert pids_marked(str(tmp_path)) == []


def test_standin_unknown_flag_is_named_in_clicks_words(tmp_path: Path) -> None:
    # A prefix of a managed flag is a flag of its own to click (no abbreviations): passed on.
    spec = _spec(tmp_path, extra_args=("--max_num_token", "3"))

    async def enter() -> None:
        async with TrtllmEngine().launch(spec):
            pytest.fail("must not become ready")

    with pytest.raises(EngineError, match=r"^trtllm unknown does not accept --max_num_token$"):
        asyncio.run(enter())
    assert pids_marked(str(tmp_path)) == []


def test_missing_trtllm_serve_fails_before_launch(tmp_path: Path) -> None:
    spec = _spec(tmp_path, engine_cmd=(str(tmp_path / "bin" / "trtllm-serve"),))

    async def enter() -> None:
        async with TrtllmEngine().launch(spec):
            pytest.fail("must not start")

    with pytest.raises(EngineError, match="engine command not found") as caught:
        asyncio.run(enter())
    assert caught.value.field == "engine_cmd"
    assert not (tmp_path / "run" / "engine-256.trtllm.yaml").exists()


@pytest.mark.slow
def test_cli_sweep_on_the_standin_writes_trtllm_yaml(
    tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    """The user's path: `budgettune sweep --engine trtllm`, two budgets, the analytic profile
    (no GPU here to profile on): each launch gets its options file and the run folder the
    engine's config."""
    script = write_standin(tmp_path)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "trtllm", "--model", "llama-3.1-8b",
         "--gpu", "h100-sxm", "--profile", "analytic",
         "--engine-cmd", f"{sys.executable} {script}", "--env", "STANDIN_FLAVOR=trtllm",
         "--budgets", "256,512", "--exhaustive", "--baseline", "none", "--max-num-seqs", "8",
         "--requests", "12", "--rate", "6", "--prompt-dist", "fixed:64",
         "--output-dist", "fixed:8", "--slo-tbt", "1s", "--slo-ttft", "5s", "-o", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "engine trtllm (as asked)" in done.stderr
    for budget in (256, 512):
        options = yaml.safe_load((run_dir / f"engine-{budget}.trtllm.yaml").read_text())
        # block reuse (its prefix cache) as TensorRT-LLM ships it: on, and not in trtllm.yaml
        assert options["kv_cache_config"] == {"enable_block_reuse": True}
    doc = json.loads((run_dir / "recommendation.json").read_text())
    assert doc["budget"] in (256, 512)
    written = yaml.safe_load((run_dir / "trtllm.yaml").read_text())
    assert written == {"max_num_tokens": doc["budget"], "enable_chunked_prefill": True,
                       "max_batch_size": 8}  # fmt: skip
    assert not (run_dir / "vllm.yaml").exists() and not (run_dir / "sglang.args").exists()
