"""The engine interface: what to launch (:class:`LaunchSpec`), what a running engine looks like
(:class:`EngineHandle`), and the :class:`Engine` protocol every engine (sim, external, vLLM,
SGLang) implements. Launching and stopping subprocesses lives in :mod:`budgettune.engines.process`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import subprocess

DEFAULT_HOST = "127.0.0.1"
DEFAULT_HEALTH_TIMEOUT_S = 120.0
DEFAULT_STOP_GRACE_S = 10.0


@dataclass(slots=True, frozen=True)
class LaunchSpec:
    """Everything needed to start one engine for one budget.

    budget_tokens: the chunked-prefill token budget (vLLM --max-num-batched-tokens, SGLang
    --chunked-prefill-size); None leaves the engine's default. chunked_prefill False asks for the
    no-chunking baseline. port None picks a free loopback port. extra_args are appended verbatim
    to the engine's command (an argument list, never a shell string); env adds variables for the
    engine process only. log_path None writes the log to a temporary file.
    """

    budget_tokens: int | None = None
    max_num_seqs: int | None = None
    chunked_prefill: bool = True
    model: str | None = None
    gpu: str | None = None
    max_model_len: int | None = None
    host: str = DEFAULT_HOST
    port: int | None = None
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    engine_cmd: tuple[str, ...] | None = None  # e.g. ("python", "-m", "vllm.entrypoints...")
    log_path: Path | None = None
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    url: str | None = None  # external engines only: the server to measure
    # Real engines only (vLLM, SGLang; the sim ignores them). None leaves the engine's default.
    # prefix_caching: every engine, the embedded one too; False (the default) turns it off.
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    prefix_caching: bool = False
    prefix_caching_by: str = ""  # who decided prefix_caching, in words (the launch's facts)
    # The user's engine config file, passed whole to every launch (vLLM --config); None: none
    engine_config: Path | None = None
    # The bearer key the server must demand (vLLM --api-key) and every request then carries;
    # None: no key. Never recorded: results keep only whether one was used.
    api_key: str | None = field(default=None, repr=False)
    # CPUs the engine process (and every process it starts) may run on; empty: not pinned.
    cpu_affinity: tuple[int, ...] = ()


@dataclass(slots=True, frozen=True)
class PrefixCachingDefault:
    """Whether an engine caches prompt prefixes when not told (``on``), and where that comes
    from, in the engine's own code (``source``, shown in a launch's facts and the docs)."""

    on: bool
    source: str


@dataclass(slots=True, frozen=True)
class ConfigFileKeys:
    """How an engine's own ``--config`` YAML names the settings budgettune reasons about: each
    as the flag it sets (dashes, no leading ones), every spelling that engine's parser takes.
    ``managed``: other keys budgettune sets on every launch (flag -> the option to use instead);
    ``suffixes``: the file names the engine accepts (empty: any)."""

    engine: str  # in words, for messages: "vLLM", "SGLang"
    budget: str
    max_num_seqs: str
    model: tuple[str, ...]
    max_model_len: tuple[str, ...]
    tensor_parallel_size: tuple[str, ...]
    gpu_memory_utilization: tuple[str, ...]
    dtype: tuple[str, ...]
    prefix_on: str | None  # "key: true" turns the prefix cache on (None: no such key)
    prefix_off: str | None  # "key: true" turns it off
    managed: Mapping[str, str] = field(default_factory=dict)
    suffixes: tuple[str, ...] = ()
    false_negates: bool = False  # "key: false" sets --no-key where that flag exists (vLLM)


@dataclass(slots=True, frozen=True)
class StartProgress:
    """One tick of an engine start, for a spinner: phase is 'starting', 'health', 'ready'."""

    engine: str
    phase: str
    elapsed_s: float
    last_log_line: str


ProgressCallback = Callable[[StartProgress], None]


@dataclass(slots=True)
class EngineHandle:
    """A running (or external) engine: where to send requests and how to find its process.

    pid/pgid are None for an external engine. ``version`` is what the engine reported (its
    /version endpoint or its command's --version). ``model`` is the served model id to put in
    requests. ``process`` is the launched Popen object (None when external).
    """

    engine: str
    url: str
    model: str
    version: str
    pid: int | None = None
    pgid: int | None = None
    log_path: Path | None = None
    budget_tokens: int | None = None
    command: tuple[str, ...] = ()
    startup_s: float = 0.0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    metrics_path: str = "/metrics"  # where its Prometheus text is (TensorRT-LLM: elsewhere)

    def exit_code(self) -> int | None:
        """The engine's exit status if its main process has exited, else None (or external)."""
        return None if self.process is None else self.process.poll()

    def alive(self) -> bool:
        """True while the launched process runs; an external engine always counts as alive."""
        return self.process is None or self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last ``lines`` lines of the engine's log ('' when there is none)."""
        return read_log_tail(self.log_path, lines)


class Engine(Protocol):
    """An engine budgettune can measure.

    ``launch`` is an async context manager: on entry the engine is healthy and answered a real
    completion; on exit (normal, exception or Ctrl-C) it is stopped and its process group gone.
    """

    name: str

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]: ...


class CommandEngine(Protocol):
    """A subprocess engine: how to build its command line; :func:`process.launch_process` does
    the rest (process group, log file, health wait, readiness request, staged stop)."""

    name: str
    health_path: str
    metrics_path: str  # its Prometheus text exposition, scraped for the self-check

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        """The argument list to start the server on ``spec.host:port``."""
        ...

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        """Variables to add to the inherited environment (``spec.env`` included)."""
        ...


def read_log_tail(path: Path | None, lines: int = 20, *, max_bytes: int = 64_000) -> str:
    """The last ``lines`` lines of a log file, reading at most ``max_bytes`` from its end."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])
