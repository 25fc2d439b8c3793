"""Typer options that describe the engine to launch, shared by `sweep` (and any command that
launches engines), and :func:`launch_spec_from_options` that validates them into a LaunchSpec."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import typer

from budgettune.core.errors import SpecError
from budgettune.core.units import parse_duration_s, parse_tokens
from budgettune.engines.base import LaunchSpec

PANEL = "Engine"

ENGINE_CMD = typer.Option(
    None,
    "--engine-cmd",
    help="How to start the engine when it is not the default `vllm serve` / `python -m "
    "sglang.launch_server`, e.g. '/opt/venv/bin/python -m vllm.entrypoints.openai.api_server' "
    "(split like a shell, never run through one).",
    rich_help_panel=PANEL,
)
ENGINE_ENV = typer.Option(
    [],
    "--env",
    help="KEY=VALUE set for the engine process only. Repeatable.",
    rich_help_panel=PANEL,
)
ENGINE_ARG = typer.Option(
    [],
    "--engine-arg",
    help="Extra engine flags passed through, e.g. --engine-arg '--enforce-eager'. Repeatable.",
    rich_help_panel=PANEL,
)
MAX_NUM_SEQS = typer.Option(
    256,
    "--max-num-seqs",
    min=1,
    help="Most running sequences (vLLM --max-num-seqs, SGLang --max-running-requests).",
    rich_help_panel=PANEL,
)
DTYPE = typer.Option(
    None, "--dtype", help="Engine dtype (e.g. float32 for vLLM on a CPU).", rich_help_panel=PANEL
)
TENSOR_PARALLEL_SIZE = typer.Option(
    None, "--tensor-parallel-size", min=1, help="GPUs per engine.", rich_help_panel=PANEL
)
GPU_MEMORY_UTILIZATION = typer.Option(
    None,
    "--gpu-memory-utilization",
    help="Share of GPU memory the engine may use, 0-1 (engine default 0.9).",
    rich_help_panel=PANEL,
)
PREFIX_CACHING = typer.Option(
    "off",
    "--prefix-caching",
    help="off (default: replays are not flattered by cache hits) or on.",
    rich_help_panel=PANEL,
)
HEALTH_TIMEOUT = typer.Option(
    None,
    "--health-timeout",
    help="How long to wait for the engine to become healthy (default 20m for vLLM/SGLang, "
    "2m for sim).",
    rich_help_panel=PANEL,
)
URL = typer.Option(
    None,
    "--url",
    help="Measure a server you run (engine external): nothing is launched.",
    rich_help_panel=PANEL,
)

_REAL_ENGINE_HEALTH_S = 20 * 60.0
_SIM_HEALTH_S = 120.0


def parse_env(items: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs; an item without '=' or with an empty key is an error naming it."""
    env: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise SpecError(f"--env: expected KEY=VALUE, got {item!r}")
        env[key.strip()] = value
    return env


def launch_spec_from_options(
    *,
    engine: str,
    model: str | None,
    gpu: str | None,
    max_num_seqs: int,
    max_model_len: str | None,
    engine_cmd: str | None,
    env: list[str],
    engine_arg: list[str],
    dtype: str | None,
    tensor_parallel_size: int | None,
    gpu_memory_utilization: float | None,
    prefix_caching: str,
    health_timeout: str | None,
    url: str | None,
) -> LaunchSpec:
    """Validate engine flags into a LaunchSpec (budget and log path are set per launch)."""
    if prefix_caching not in ("on", "off"):
        raise SpecError(f"--prefix-caching: use on or off, got {prefix_caching!r}")
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise SpecError(
            f"--gpu-memory-utilization: must be in (0, 1], got {gpu_memory_utilization!r}"
        )
    extra: list[str] = []
    for item in engine_arg:
        extra += shlex.split(item)
    command = tuple(shlex.split(engine_cmd)) if engine_cmd else None
    if engine_cmd is not None and not command:
        raise SpecError("--engine-cmd: empty command")
    default_health_s = _SIM_HEALTH_S if engine == "sim" else _REAL_ENGINE_HEALTH_S
    health_s = (
        parse_duration_s(health_timeout, field="--health-timeout")
        if health_timeout
        else default_health_s
    )
    return LaunchSpec(
        max_num_seqs=max_num_seqs,
        model=model,
        gpu=gpu if engine == "sim" else None,
        max_model_len=parse_tokens(max_model_len, field="--max-model-len")
        if max_model_len
        else None,
        extra_args=tuple(extra),
        env=parse_env(env),
        engine_cmd=command,
        health_timeout_s=health_s,
        url=url,
        dtype=dtype,
        tensor_parallel_size=tensor_parallel_size,
        gpu_memory_utilization=gpu_memory_utilization,
        prefix_caching=prefix_caching == "on",
    )


def resolve_auto_engine(engine: str, url: str | None, engine_cmd: str | None) -> tuple[str, str]:
    """The engine to use and a one-line reason. ``auto`` picks vLLM when it is installed and a
    GPU is visible, else the built-in simulated engine."""
    name = engine.strip().lower()
    if url is not None:
        if name not in ("auto", "external"):
            raise SpecError(f"--url: measures a running server; drop --engine {engine}")
        return "external", f"measuring the server at {url} (nothing launched)"
    if name != "auto":
        return name, f"engine {name} (as asked)"
    vllm = engine_cmd is not None or shutil.which("vllm") is not None
    gpu = _gpu_visible()
    if vllm and gpu:
        return "vllm", "engine auto: vLLM is installed and a GPU is visible, so using vllm"
    why = "vLLM is not installed" if not vllm else "no GPU is visible (nvidia-smi)"
    return "sim", f"engine auto: {why}, so using the built-in simulated engine (sim)"


def _gpu_visible() -> bool:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        listed = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout
