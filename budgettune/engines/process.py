"""Subprocess lifecycle shared by every launched engine: free port, own process group, log file,
health wait with progress ticks, readiness by a real completion, and a staged stop (SIGINT, then
SIGTERM, then SIGKILL of the whole group) that runs on normal exit, exceptions and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx

from budgettune.core.auth import bearer_headers
from budgettune.core.errors import EngineError, UserError
from budgettune.core.files import storage_error
from budgettune.engines.base import (
    CommandEngine,
    EngineHandle,
    LaunchSpec,
    ProgressCallback,
    StartProgress,
    read_log_tail,
)

HEALTH_POLL_S = 0.2
# When set, every engine start appends one JSON line here: the engine, its budget and its seconds
# from launch to ready (null when it never got there). The test suite reads it to print what its
# engine starts cost; a user can read what a long sweep spent on starts.
LAUNCH_LOG_VAR = "BUDGETTUNE_LAUNCH_LOG"
KILL_WAIT_S = 5.0
# Token ids for the readiness request: small ids exist in every vocabulary (byte-level BPE has
# 256 byte tokens), so the request is valid for tiny test models as well as real ones.
READINESS_PROMPT = [11, 12, 13, 14]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free on ``host`` right now (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` and we could bind it. Both are asked: a
    server listening on ``::`` (IPv6 and IPv4 at once) leaves 127.0.0.1:port bindable, yet it
    answers there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) != 0


def listening_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on TCP ``port`` (IPv4 and IPv6), from /proc/net; None where the
    kernel does not tell (not Linux)."""
    found: set[str] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            parts = line.split()
            # local_address is HEXADDR:HEXPORT; state 0A is LISTEN; the inode is column 9
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                found.add(parts[9])
    return found if seen else None


def group_listens(pgid: int, port: int) -> bool | None:
    """Whether a process of group ``pgid`` holds a socket listening on ``port``; None when
    this cannot be told (no /proc, or another user's processes)."""
    inodes = listening_inodes(port)
    if inodes is None:
        return None
    if not inodes:
        return False
    readable = False
    for pid in group_members(pgid):
        try:
            entries = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # gone meanwhile, or not ours to read
            continue
        readable = True
        for entry in entries:
            try:
                link = os.readlink(entry)
            except OSError:  # closed meanwhile (the listing's own descriptor, for one)
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    return False if readable else None


def _parent_death_signal(cpus: tuple[int, ...] = ()) -> Callable[[], None] | None:
    """A preexec function making Linux send SIGTERM to the engine if budgettune dies (even by
    SIGKILL), so no server outlives us, and pinning it to ``cpus`` (when given) before it runs,
    so every process it starts is pinned too. The libc lookup happens here, in the parent."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    parent_pid = os.getpid()

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        # If budgettune died between fork and the prctl above, no signal will ever come:
        # the orphan has been re-parented already, so it must not start at all.
        if os.getppid() != parent_pid:
            os._exit(1)
        if cpus:
            os.sched_setaffinity(0, cpus)

    return preexec


def start_process(
    command: list[str],
    *,
    env: dict[str, str] | None,
    log_path: Path,
    cpu_affinity: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``command`` in a new session (its own process group), stdout and stderr appended to
    ``log_path``, stdin closed, pinned to ``cpu_affinity`` when given. Raises EngineError when
    the executable cannot be started."""
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 (closed below, the engine keeps its copy)
    except OSError as error:
        raise storage_error(error, log_path, field="output") from None
    full_env = {**os.environ, **(env or {})}
    with log:
        try:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=full_env,
                start_new_session=True,
                preexec_fn=_parent_death_signal(cpu_affinity),  # parent-death signal, CPUs
            )
        except OSError as exc:
            raise EngineError(
                f"cannot start {command[0]!r}: {exc.strerror or exc}",
                field="engine_cmd",
                hint="check the engine command and that it is installed",
            ) from None


def group_members(pgid: int) -> list[int]:
    """PIDs of the live (non-zombie) processes of process group ``pgid``.

    Scans /proc on Linux because ``killpg(pgid, 0)`` also succeeds for unreaped zombies, which a
    container's init may never reap; elsewhere falls back to ``killpg``.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Format: pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def kill_group_now(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the group, ignoring a group that is already gone (last-resort cleanup)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def stop_process(
    process: subprocess.Popen[bytes], pgid: int, *, grace_s: float
) -> str | None:
    """Stop the group: SIGINT, then SIGTERM, then SIGKILL, waiting ``grace_s`` after each of the
    first two and until the group is gone after SIGKILL. Returns the signal name that ended it
    ('SIGINT', ...), or None when it had already exited. Raises EngineError if members survive
    SIGKILL (e.g. uninterruptible sleep)."""
    if process.poll() is not None and not group_members(pgid):
        return None
    for sig, wait_s in (
        (signal.SIGINT, grace_s),
        (signal.SIGTERM, grace_s),
        (signal.SIGKILL, KILL_WAIT_S),
    ):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            process.poll()
            return sig.name
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            process.poll()  # reap the leader so it does not linger as a zombie
            if process.returncode is not None and not group_members(pgid):
                return sig.name
            await asyncio.sleep(0.05)
    left = group_members(pgid)
    if left:
        raise EngineError(f"process group {pgid} survived SIGKILL: pids {left}")
    return "SIGKILL"


def _log_file(spec: LaunchSpec, engine: str) -> Path:
    if spec.log_path is not None:
        return spec.log_path
    handle, name = tempfile.mkstemp(prefix=f"budgettune-{engine}-", suffix=".log")
    os.close(handle)
    return Path(name)


UNAUTHORIZED = 401


async def _probe_version(client: httpx.AsyncClient, url: str) -> str:
    """vLLM and the sim engine answer GET /version with {"version": "..."}."""
    try:
        response = await client.get(f"{url}/version")
        if response.status_code == 200:
            return str(response.json().get("version", "unknown"))
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return "unknown"


async def served_model(client: httpx.AsyncClient, url: str) -> str:
    """The first model id listed by GET /v1/models (what requests must name). Raises UserError
    (field ``api_key``) when the server answers 401: it wants another API key, or one."""
    response = await client.get(f"{url}/v1/models")
    if response.status_code == UNAUTHORIZED:
        given = "Authorization" in client.headers
        raise UserError(
            f"{url} refused the {'given' if given else 'missing'} API key (HTTP 401)",
            field="api_key",
            hint="give the key the server was started with (vllm serve --api-key) with "
            "--api-key, or in VLLM_API_KEY or OPENAI_API_KEY",
        )
    response.raise_for_status()
    data = response.json().get("data") or []
    if not data:
        raise EngineError(f"{url}/v1/models lists no model")
    return str(data[0]["id"])


async def check_ready(client: httpx.AsyncClient, url: str, model: str) -> None:
    """Readiness by a real request: a one-token completion must succeed."""
    body = {"model": model, "prompt": READINESS_PROMPT, "max_tokens": 1, "temperature": 0.0}
    response = await client.post(f"{url}/v1/completions", json=body)
    if response.status_code != 200:
        raise EngineError(
            f"{url} is healthy but a one-token test completion failed: "
            f"HTTP {response.status_code}: {response.text[:300]}"
        )


async def wait_until_ready(
    name: str,
    process: subprocess.Popen[bytes] | None,
    url: str,
    *,
    health_path: str,
    timeout_s: float,
    log_path: Path | None,
    on_progress: ProgressCallback | None,
    api_key: str | None = None,
) -> tuple[str, str, float]:
    """Poll ``health_path`` until 200, then check a real completion. Returns (model id, version,
    seconds it took). Raises EngineError with the log tail if the process exits or the timeout
    passes first."""
    started = time.monotonic()

    def tick(phase: str) -> float:
        elapsed = time.monotonic() - started
        if on_progress is not None:
            last = read_log_tail(log_path, 1) if log_path else ""
            on_progress(StartProgress(name, phase, elapsed, last))
        return elapsed

    def failed(message: str, hint: str | None = None) -> EngineError:
        return EngineError(message, log_tail=read_log_tail(log_path, 30), hint=hint)

    timeout = httpx.Timeout(10.0, connect=2.0)
    async with httpx.AsyncClient(timeout=timeout, headers=bearer_headers(api_key)) as client:
        while True:
            if process is not None and process.poll() is not None:
                raise failed(f"engine {name} exited with status {process.returncode} during start")
            elapsed = tick("health")
            if elapsed > timeout_s:
                raise failed(
                    f"engine {name} was not healthy after {timeout_s:.0f} s at {url}{health_path}",
                    hint="a large model can take minutes: raise --health-timeout",
                )
            try:
                response = await client.get(f"{url}{health_path}")
                if response.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            await asyncio.sleep(HEALTH_POLL_S)
        tick("ready-check")
        try:
            model = await served_model(client, url)
            await check_ready(client, url, model)
        except EngineError as exc:
            raise failed(str(exc)) from None
        except httpx.HTTPError as exc:
            raise failed(f"engine {name} at {url} failed its readiness request: {exc!r}") from None
        version = await _probe_version(client, url)
    elapsed = tick("ready")
    return model, version, elapsed


def note_launch(engine: str, budget_tokens: int | None, ready_s: float | None) -> None:
    """One line in $BUDGETTUNE_LAUNCH_LOG, when it is set. A line is one small write to a file
    opened for appending, so starts in parallel processes do not tear each other's lines; a log
    that cannot be written costs the start nothing."""
    path = os.environ.get(LAUNCH_LOG_VAR)
    if not path:
        return
    line = json.dumps(
        {"engine": engine, "budget_tokens": budget_tokens, "ready_s": ready_s, "pid": os.getpid()}
    )
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


@contextlib.asynccontextmanager
async def launch_process(
    engine: CommandEngine, spec: LaunchSpec, on_progress: ProgressCallback | None = None
) -> AsyncIterator[EngineHandle]:
    """Start ``engine`` for ``spec``, wait until it is healthy and answers, yield its handle, and
    stop its whole process group on exit, whatever the reason (exception, cancellation, Ctrl-C).

    Raises UserError when ``spec.port`` is taken, EngineError (with the log tail) when the engine
    cannot start, exits during start, or is not ready within ``spec.health_timeout_s``.
    """
    if spec.port is not None and not port_is_free(spec.host, spec.port):
        raise UserError(f"{spec.host}:{spec.port} is already in use", field="port")
    port = spec.port if spec.port is not None else free_port(spec.host)
    command = engine.command(spec, port)
    log_path = _log_file(spec, engine.name)
    process = start_process(
        command, env=engine.environment(spec), log_path=log_path, cpu_affinity=spec.cpu_affinity
    )
    pgid = process.pid  # start_new_session: the leader's pid is the group id
    url = f"http://{spec.host}:{port}"
    ready_s: float | None = None
    try:
        try:
            model, version, startup_s = await wait_until_ready(
                engine.name,
                process,
                url,
                health_path=engine.health_path,
                timeout_s=spec.health_timeout_s,
                log_path=log_path,
                on_progress=on_progress,
                api_key=spec.api_key,
            )
            ready_s = startup_s
        finally:
            note_launch(engine.name, spec.budget_tokens, ready_s)
        if group_listens(pgid, port) is False:
            # What answered is another server on the port, not the engine just started (which
            # could not bind it): measuring it would label its figures with our budget.
            raise EngineError(
                f"another server answers on {spec.host}:{port}, not the {engine.name} engine "
                "budgettune started",
                field="port",
                log_tail=read_log_tail(log_path, 30),
                hint="stop the other server, or give another --port",
            )
        yield EngineHandle(
            engine=engine.name,
            url=url,
            model=model,
            version=version,
            pid=process.pid,
            pgid=pgid,
            log_path=log_path,
            budget_tokens=spec.budget_tokens,
            command=tuple(command),
            startup_s=startup_s,
            process=process,
            metrics_path=engine.metrics_path,
        )
    finally:
        try:
            await stop_process(process, pgid, grace_s=spec.stop_grace_s)
        except BaseException:
            # A second Ctrl-C or a cancellation while stopping: do not leave the group behind.
            kill_group_now(pgid)
            process.poll()
            raise
