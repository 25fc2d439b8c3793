"""The engine path: `budgettune profile --engine sim` against the embedded engine, launched for
real and driven over HTTP on 127.0.0.1, recovers the parameters it was configured with."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from budgettune.app.profile import (
    ProfileConfig,
    build_timer,
    engine_launch_spec,
    profile_config_of,
    run_profile,
)
from budgettune.app.requests import ProfileRequest
from budgettune.core.errors import EngineError, UserError
from budgettune.core.hardware import ModelShape, resolve_gpu, resolve_model
from budgettune.model.calibration import CalibrationChoice
from budgettune.model.profile import load_profile
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.measure import EngineTimer, kv_capacity_from_metrics, steady_iterations
from budgettune.profiling.plan import IterationTimer


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_steady_iterations_by_hand() -> None:
    us = 1_000
    jitter = [0, 300, 0, 200, -100, 0, 300, -200, 100, 0, 0, 0]
    # Stream a decodes every 10 ms from 0; b joins at 20 ms and runs 10 ms past a's end.
    a = [k * 10_000 * us + jitter[k] * us for k in range(10)]
    b = [k * 10_000 * us - jitter[k] * us for k in range(2, 12)]
    times, index = steady_iterations([a, b], segments=2)
    # Window 20..90 ms: 8 tokens of each (b's 100 and 110 ms are past a's last token), 7
    # iterations cut into runs 0..4 and 4..7 (tokens of a: 2..6 and 6..9).
    span_a = [(a[6] - a[2]) / 4, (a[9] - a[6]) / 3]
    span_b = [(b[4] - b[0]) / 4, (b[7] - b[4]) / 3]
    np.testing.assert_allclose(times, np.median([span_a, span_b], axis=0) / 1e9)
    np.testing.assert_allclose(times, [0.010, 0.010], rtol=1e-9)  # the jitter cancels
    # The gaps end with tokens 3..9 of a (offset 2) and 1..7 of b (offset 0): 5 and 3 generated.
    assert index == pytest.approx(1 + 8 / 2)
    assert len(steady_iterations([[0, 5], [10, 20]], 3)[0]) == 0  # never side by side


def test_steady_iterations_time_bunched_tokens_by_the_last_of_each_bunch() -> None:
    # A starved API server sends a 4 ms decode's tokens two or three at a time: each bunch
    # leaves when its last token is made, so the ones before it carry a late stamp.
    made_ns = [k * 4_000_000 for k in range(40)]
    sent_ns = []
    for k in range(40):
        last_of_bunch = min(k + (2 - k % 3), 39) if k < 39 else 39
        sent_ns.append(made_ns[last_of_bunch] + 150_000)
    times, _ = steady_iterations([sent_ns], segments=3)
    assert len(times) == 3
    np.testing.assert_allclose(times, 0.004, rtol=0.02)


def test_launch_spec_holds_the_largest_probe() -> None:
    config = ProfileConfig(
        model="llama-3.1-8b", engine="vllm", max_tokens=8192, max_batch=256, dtype="float32"
    )
    spec = engine_launch_spec(config, resolve_model("llama-3.1-8b"))
    assert spec.budget_tokens == 8192 + 256  # the largest prompt beside the largest batch
    assert spec.max_num_seqs == 257
    assert spec.max_model_len == 8192 + 1024
    assert spec.prefix_caching is False and spec.dtype == "float32"
    assert spec.health_timeout_s == 1200.0
    sim = engine_launch_spec(
        ProfileConfig(
            model="llama-3.1-8b",
            engine="sim",
            gpu_name="a100-80g",
            calibration=CalibrationChoice("seed", overhead_ms=4.0),
        ),
        resolve_model("llama-3.1-8b"),
    )
    assert sim.gpu == "a100-80g"
    # the engine runs the calibration asked for, and only the figures given beside it
    assert sim.extra_args[sim.extra_args.index("--calibration") + 1] == "seed"
    assert sim.extra_args[sim.extra_args.index("--overhead-ms") + 1] == "4.0"
    assert "--mode" not in sim.extra_args and "--compute-efficiency" not in sim.extra_args


@pytest.mark.timing  # step times within 5%
@pytest.mark.slow
def test_sim_engine_profile_recovers_its_configuration(tmp_path: Path) -> None:
    """F, B, t0 within 5%, the serialized variant, and P* within 10% of the ridge, on the sim
    engine in the seed calibration (a hard knee pins t0 apart from the weight read; the
    measured calibration's soft knee is recovered in test_profile_fit on the same model).

    The engine runs at --time-scale 2 (every step twice as long) so that the wall-clock jitter
    of a shared 2-core machine stays small beside an iteration; its effective parameters are
    F / 2, B / 2 and 2 t0, and the ridge F / B is unchanged.
    """
    scale = 2.0
    config = ProfileConfig(
        # Llama-2-13B has no grouped KV heads: its large KV bytes per token let the decode
        # probes tell t0 from the weight read, and the mixed ones tell the two variants apart.
        model="llama-2-13b",
        engine="sim",
        gpu_name="h100-sxm",
        max_tokens=2048,
        # batches to 16, not 32: F, B and t0 came within 1% (of the 5% allowed) either way, and
        # the probes of 32 decodes at 1024 tokens took 23 of the test's 75 s
        max_batch=16,
        contexts=(128, 1024),
        # 3 repeats, as the vLLM profile test: the medians of 5 bought no accuracy the 5% needs
        repeats=3,
        typical_context=1024,
        calibration=CalibrationChoice("seed", overhead_ms=4.0, mode="serialized"),
        engine_args=("--time-scale", str(scale)),
        output=tmp_path / "sim.json",
        bootstrap=100,
    )
    timers: list[IterationTimer] = []

    def factory(c: ProfileConfig, shape: ModelShape) -> IterationTimer:
        timers.append(build_timer(c, shape))
        return timers[-1]

    outcome = run_profile(config, timer_factory=factory)
    truth = StepModel.from_hardware(
        resolve_model("llama-2-13b"),
        resolve_gpu("h100-sxm"),
        calibration=config.calibration.resolve("h100-sxm"),
    )
    profile = outcome.profile
    step = profile.step
    assert step is not None and profile.complete
    assert step.flops_per_s == pytest.approx(truth.flops_per_s / scale, rel=0.05)
    assert step.bytes_per_s == pytest.approx(truth.bytes_per_s / scale, rel=0.05)
    assert step.overhead_s == pytest.approx(truth.overhead_s * scale, rel=0.05)
    assert step.mode == "serialized", step.mode_reason
    assert step.request_overhead_s is not None and 0 <= step.request_overhead_s < 0.02
    ridge = profile.ridge
    assert ridge is not None and ridge.knee_found, ridge and ridge.reason
    assert ridge.knee_tokens == pytest.approx(truth.ridge_tokens, rel=0.10)
    for err in step.holdout.values():
        assert err.median_rel_error < 0.15  # held-out probes predicted (the bar)
    assert profile.engine.name == "sim" and profile.engine.version
    assert profile.hardware.preset == "h100-sxm"
    assert {p.series for p in profile.probes} == {"prefill", "decode", "mixed"}
    timer = timers[0]
    assert isinstance(timer, EngineTimer) and timer.handle.pid is not None
    assert _gone(timer.handle.pid)  # the engine was stopped with the profile
    assert load_profile(tmp_path / "sim.json") == profile


@pytest.mark.slow
def test_probe_rejected_midway_saves_what_was_measured(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """An engine whose max model length is below --max-tokens answers 400 at the first prompt
    that does not fit: the smaller ones are kept, the engine is stopped, exit status 1."""
    out = tmp_path / "short.json"
    result = subprocess.run(
        [*budgettune_cmd, "profile", "--engine", "sim", "--model", "llama-3.1-8b",
         "--max-tokens", "2048", "--repeats", "1", "--engine-arg", "--max-model-len 300",
         "--engine-arg", "--time-scale 0.2", "-o", str(out), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith("error: profile stopped early: probe prefill (prompt 320) failed")
    assert "http 400" in first and f"saved to {out}" in first
    partial = load_profile(out)
    assert not partial.complete
    assert [p.prompt_tokens for p in partial.probes][-1] <= 300
    assert len(partial.probes) >= 6
    assert result.stdout == ""


@pytest.mark.timing  # which prefill outlasts 1 s
@pytest.mark.slow
def test_probe_timeout_on_the_engine_path_saves_what_was_measured(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """At 40 times real time a prefill of 1024 tokens takes over a second (the seed
    calibration's figures): with --probe-timeout 1s its request times out, the message names
    the option, the smaller sizes are kept."""
    out = tmp_path / "slow.json"
    result = subprocess.run(
        [*budgettune_cmd, "profile", "--engine", "sim", "--model", "llama-3.1-8b",
         "--calibration", "seed",
         "--max-tokens", "2048", "--repeats", "1", "--probe-timeout", "1s",
         "--engine-arg", "--time-scale 40", "-o", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    first = result.stderr.strip().splitlines()[0]
    assert first.startswith("error: profile stopped early: probe prefill (prompt ")
    assert "no answer within --probe-timeout 1 s" in first and f"saved to {out}" in first
    partial = load_profile(out)
    assert not partial.complete and partial.error and "--probe-timeout" in partial.error
    sizes = [p.prompt_tokens for p in partial.probes]
    assert sizes[0] == 32 and len(sizes) >= 5 and max(sizes) < 1024
    assert out.with_suffix(".csv").is_file()
    assert "Traceback" not in result.stderr


def test_engine_that_cannot_start(budgettune_cmd: list[str], tmp_path: Path) -> None:
    result = subprocess.run(
        [*budgettune_cmd, "profile", "--engine", "sim", "--model", "llama-3.1-8b",
         "--engine-arg", "--no-such-flag"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error:") and "Traceback" not in result.stderr
    assert "no-such-flag" in result.stderr  # the engine's own complaint, from its log tail
    assert not (tmp_path / "profiles").exists()


def test_engine_error_is_an_engine_error() -> None:
    config = ProfileConfig(model="llama-3.1-8b", engine="sim", engine_args=("--bogus",))
    with pytest.raises(EngineError):
        build_timer(config, resolve_model("llama-3.1-8b"))


def test_json_profile_names_the_sim_hardware(budgettune_cmd: list[str], tmp_path: Path) -> None:
    """A quick real run at a quarter of real time: tiny grid, the document is complete. With the
    user's engine config: the launch reads it under the probes' own flags, and the profile
    records what it read (the credential hidden)."""
    prod = tmp_path / "prod.yaml"
    prod.write_text("# prod\ndtype: float16\nswap-space: 4\nhf-token: hf_secret123\n")
    result = subprocess.run(
        [*budgettune_cmd, "profile", "--engine", "sim", "--model", "llama-3.1-8b",
         "--gpu", "a100-80g", "--max-tokens", "512", "--max-batch", "4", "--contexts", "128",
         "--repeats", "2", "--typical-context", "128", "--engine-arg", "--time-scale 0.25",
         "--engine-config", str(prod), "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    command = doc["engine"]["settings"]["command"]
    assert command[command.index("--config") + 1] == str(prod)
    assert command[command.index("--dtype") + 1] == "float16"  # the file's, as given
    assert doc["engine"]["settings"]["engine_config_text"] == (
        "# prod\ndtype: float16\nswap-space: 4\nhf-token: '***'\n"
    )
    assert "hf_secret123" not in result.stdout
    assert doc["hardware"] == {
        "kind": "sim",
        "name": "simulated a100-80g",
        "count": 1,
        "driver": None,
        "preset": "a100-80g",
    }
    assert doc["profile"] == "profiles/llama-3.1-8b_a100-80g_sim.json"
    assert doc["engine"]["settings"]["budget_tokens"] == 768  # 512 + 4, rounded up to 256
    assert set(doc["step"]["errors"]) == {"prefill", "decode", "mixed"}


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("max-num-batched-tokens: 512\n", {}, "'max-num-batched-tokens' is set by budgettune"),
        ("dtype: float16\n", {"dtype": "float32"}, "'dtype' is also given as --dtype float32"),
        ("model: other-model\n", {}, "'model' is also given as --model llama-3.1-8b"),
    ],
)
def test_profile_engine_config_refuses_what_a_sweep_refuses(
    tmp_path: Path, text: str, options: dict[str, object], message: str
) -> None:
    path = tmp_path / "prod.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        profile_config_of(_profile_request(engine_config=path, **options))


def test_profile_engine_config_takes_what_changes_an_iteration(tmp_path: Path) -> None:
    path = tmp_path / "prod.yaml"
    path.write_text(
        "model: llama-3.1-8b\ndtype: float16\ntp: 2\ngpu-memory-utilization: 0.8\n"
        "max-num-seqs: 64\nmax-model-len: 2048\n"
    )
    config = profile_config_of(_profile_request(engine_config=path))
    assert (config.dtype, config.tensor_parallel, config.gpu_memory_utilization) == (
        "float16", 2, 0.8)  # fmt: skip
    spec = engine_launch_spec(config, resolve_model("llama-3.1-8b"))
    # the probes' own limits go on the command line, which wins over the file's 64 and 2048
    assert (spec.engine_config, spec.max_num_seqs, spec.max_model_len) == (
        path.resolve(), config.max_batch + 1, config.max_tokens + 1024)  # fmt: skip
    with pytest.raises(UserError, match="not by torch"):
        profile_config_of(_profile_request(engine="torch", engine_config=path))


def _profile_request(**changes: object) -> ProfileRequest:
    base = ProfileRequest(
        model="llama-3.1-8b", engine="vllm", gpu_name="auto", max_tokens="8192", repeats=5,
        output=None, max_batch=64, contexts="256,1024", dtype="auto", device="auto",
        threads=None, typical_batch=64, typical_context=1024, probe_timeout="300s", seed=0,
        tensor_parallel=1, engine_arg=(), engine_cmd=None, env=(), health_timeout=None,
        compare=(),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_kv_capacity_from_vllm_metrics() -> None:
    text = (
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",'
        'gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="4096"} 1.0\n'
    )
    assert kv_capacity_from_metrics(text) == 4096 * 16
    assert kv_capacity_from_metrics("vllm:num_requests_running 0\n") is None
    assert kv_capacity_from_metrics('vllm:cache_config_info{block_size="16"} 1.0\n') is None


def test_kv_capacity_reads_escaped_info_labels() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",'
        'kv_cache_memory_bytes="None",model_file="a \\"}\\" b",num_gpu_blocks="512"} 1.0\n'
    )
    assert kv_capacity_from_metrics(text) == 512 * 16
    assert kv_capacity_from_metrics("vllm:cache_config_info{block_size= 1\n") is None
