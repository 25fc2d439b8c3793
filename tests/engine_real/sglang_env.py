"""Where SGLang's CPU path lives for the `sglang`-marked tests (scripts/install-sglang-cpu.sh),
and the recipe they start it with. Process watching is vllm_env's (one /proc scan for both)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from vllm_env import ENGINE_CORE, MARK_VAR, REPO_ROOT, in_ci

from budgettune.engines.base import LaunchSpec

SGLANG_VENV = Path(os.environ.get("BUDGETTUNE_SGLANG_VENV", str(REPO_ROOT / ".venv-sglang")))
LAUNCH_MODULE = "sglang.launch_server"
# SGLang's three processes (server, scheduler, detokenizer) on core 0, the client on core 1,
# as for vLLM (vllm_env): sharing cores, the client's loop waits in the run queue and stamps
# tokens late.
CPU_WRAPPER = ("taskset", "-c", str(ENGINE_CORE))
# The CPU recipe: SGLang's CPU path (--device cpu; budgettune adds SGLANG_USE_CPU_ENGINE=1), a
# 64k-token KV pool (SGLang sizes it from --mem-fraction-static of the free RAM otherwise: 0.843
# of ~20 GB here, tens of seconds of zero-filling at every start), no warm-up request, and no
# overlap scheduler (it overlaps result processing with the next batch, on one core nothing;
# with it on, the profile's mixed probe on the 4-layer model failed: "could not find the
# decoders' iteration that held the injected prompt"; with it off the profile completed).
ENGINE_ARG_ITEMS = (
    "--device cpu", "--max-total-tokens 65536", "--skip-server-warmup",
    "--disable-overlap-schedule",
)  # fmt: skip
ENGINE_FLAGS = tuple(part for item in ENGINE_ARG_ITEMS for part in shlex.split(item))
# budgettune's default tiny Llama (4 layers, hidden 256, 5.2 M parameters), as the vllm tests
# use. On the 2-layer, hidden-128 one an SGLang iteration cost about the same at 64 and at 1024
# prompt tokens (25-40 ms of Python and dispatch, ~0.03 ms a token): the decoders' gaps could not
# tell a small budget from a large one, so the chunking trade-off was not measurable on it.
TINY_MODEL: tuple[str, ...] = ()


def sglang_python_or_skip() -> Path:
    """The SGLang venv's python. Missing: a failure under CI=true (never a silent skip there),
    a skip with the install command otherwise."""
    python = SGLANG_VENV / "bin" / "python"
    if python.exists():
        return python
    message = f"SGLang CPU venv missing at {SGLANG_VENV}: run scripts/install-sglang-cpu.sh"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def engine_argv(python: Path) -> tuple[str, ...]:
    """The engine command of the CPU recipe: SGLang's launch module behind CPU_WRAPPER."""
    return (*CPU_WRAPPER, str(python), "-m", LAUNCH_MODULE)


def engine_cmd_text(python: Path) -> str:
    return shlex.join(engine_argv(python))


def engine_flag_args(extra: tuple[str, ...] = ()) -> list[str]:
    """The recipe's flags (and ``extra`` items) as the CLI's repeatable --engine-arg options."""
    return [arg for item in (*ENGINE_ARG_ITEMS, *extra) for arg in ("--engine-arg", item)]


def sglang_env(mark: str) -> dict[str, str]:
    """No hub access, and the mark that finds the engine's processes by PID."""
    return {"HF_HUB_OFFLINE": "1", MARK_VAR: mark}


def env_args(mark: str) -> list[str]:
    return [a for k, v in sglang_env(mark).items() for a in ("--env", f"{k}={v}")]


# What `python -m sglang.launch_server` does with its command line before it loads a model
# (launch_server.py: prepare_server_args, then run_server's resolve_once and resolving_view):
# printed as JSON, the settings the server would run with.
_RESOLVE_LAUNCH_ARGS = """
import json, os, sys
from sglang.srt.arg_groups.overrides import resolving_view
from sglang.srt.server_args import prepare_server_args
server_args = prepare_server_args(sys.argv[1:])
server_args.resolve_once()
view = resolving_view(server_args)
names = os.environ["RESOLVED_NAMES"].split(",")
print(json.dumps({name: getattr(view, name) for name in names}))
"""


RESOLVED_NAMES = ("chunked_prefill_size", "max_running_requests", "dtype", "model_path")


def resolve_launch_args(
    python: Path,
    argv: list[str],
    mark: str,
    names: tuple[str, ...] = RESOLVED_NAMES,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """How the installed SGLang reads a launch_server command line (run in ``cwd``: a relative
    ``--config`` is read from there), without starting a server: a test whose subject is
    written arguments, not the engine's start, asks SGLang's own code. ``names``: the server
    settings returned."""
    env = {**os.environ, **sglang_env(mark), "SGLANG_USE_CPU_ENGINE": "1",
           "RESOLVED_NAMES": ",".join(names)}  # fmt: skip
    done = subprocess.run(
        [str(python), "-c", _RESOLVE_LAUNCH_ARGS, *argv],
        capture_output=True, text=True, timeout=300, env=env, cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def sglang_spec(
    python: Path,
    model: Path,
    *,
    budget: int | None,
    log_path: Path,
    mark: str,
    extra: tuple[str, ...] = (),
    max_num_seqs: int | None = 16,
) -> LaunchSpec:
    """The CPU recipe in fp32 (bf16 matmuls are slow on this CPU), ``extra`` flags after it."""
    return LaunchSpec(
        budget_tokens=budget,
        max_num_seqs=max_num_seqs,
        model=str(model),
        dtype="float32",
        engine_cmd=engine_argv(python),
        extra_args=(*ENGINE_FLAGS, *extra),
        env=sglang_env(mark),
        log_path=log_path,
        health_timeout_s=300.0,
        stop_grace_s=15.0,
    )


# The probe grid: prompts to 2048 tokens (the live tests' longest prompt is 2000), decode
# batches to 4 (they run 2 decoders), 2 repeats: 35 probes, 41-47 s of probing here.
PROFILE_GRID = ("--max-tokens", "2048", "--max-batch", "4", "--repeats", "2")


@dataclass(slots=True, frozen=True)
class ProfileRun:
    """`budgettune profile --engine sglang`: its file, the document, the wall time."""

    path: Path
    saved: dict[str, Any]
    stdout_doc: dict[str, Any]
    wall_s: float
