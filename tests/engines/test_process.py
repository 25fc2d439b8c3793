"""Engine lifecycle with real processes: launch, health, readiness, staged stop of the whole
group, failed starts with the log tail, timeouts, cancellation, ports. Every test checks by PID
that nothing it started is left."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from budgettune.core.errors import EngineError, SpecError, UserError
from budgettune.engines.base import LaunchSpec, StartProgress
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.external import ExternalEngine, normalize_url
from budgettune.engines.process import (
    free_port,
    group_members,
    launch_process,
    port_is_free,
    start_process,
    stop_process,
)
from budgettune.engines.registry import get_engine


def _gone(pid: int) -> bool:
    return not group_members(pid)


def _dead(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet (the container's init may not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] == "Z"


class ScriptEngine:
    """A stand-in engine: runs a Python script (a real process), for failure paths."""

    name = "script"
    health_path = "/health"

    def __init__(self, script: str) -> None:
        self.script = textwrap.dedent(script)

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        return [sys.executable, "-c", self.script, str(port)]

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return {"PYTHONUNBUFFERED": "1"}


def test_sim_engine_launch_serves_then_stops_its_group(tmp_path: Path) -> None:
    ticks: list[StartProgress] = []
    spec = LaunchSpec(budget_tokens=256, log_path=tmp_path / "engine.log")

    async def scenario() -> int:
        async with SimEngine().launch(spec, ticks.append) as handle:
            assert handle.pid is not None and handle.alive()
            assert handle.model == "llama-3.1-8b" and handle.version != "unknown"
            assert "--max-num-batched-tokens" in handle.command and "256" in handle.command
            async with httpx.AsyncClient() as client:
                response = await client.get(f"{handle.url}/health")
                assert response.status_code == 200
            return handle.pid

    pid = asyncio.run(scenario())
    assert _gone(pid)
    assert ticks and ticks[-1].phase == "ready"
    log = (tmp_path / "engine.log").read_text()
    assert "budget 256" in log and "stopped;" in log  # SIGINT gave a clean shutdown


def test_start_failure_raises_engine_error_with_log_tail(tmp_path: Path) -> None:
    spec = LaunchSpec(model="no-such-model", log_path=tmp_path / "bad.log")

    async def scenario() -> None:
        async with SimEngine().launch(spec):
            pass

    with pytest.raises(EngineError) as caught:
        asyncio.run(scenario())
    assert "exited with status 2 during start" in str(caught.value)
    assert "no-such-model" in caught.value.log_tail


def _script_pids(marker: bytes) -> list[int]:
    """Processes whose command line holds ``marker`` (our stand-in scripts), via /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                out.append(int(entry.name))
    return out


def test_health_timeout_kills_the_process(tmp_path: Path) -> None:
    engine = ScriptEngine(
        """
        import time
        print("loading weights...")  # health-timeout-marker
        time.sleep(120)
        """
    )
    spec = LaunchSpec(health_timeout_s=1.0, log_path=tmp_path / "slow.log", stop_grace_s=1.0)
    ticks: list[StartProgress] = []
    pids: set[int] = set()

    def on_progress(tick: StartProgress) -> None:
        ticks.append(tick)
        pids.update(_script_pids(b"health-timeout-marker"))

    async def scenario() -> None:
        async with launch_process(engine, spec, on_progress):
            pass

    with pytest.raises(EngineError, match="not healthy after 1 s") as caught:
        asyncio.run(scenario())
    assert "loading weights" in caught.value.log_tail
    assert any(t.last_log_line == "loading weights..." for t in ticks)
    assert len(pids) == 1 and all(_gone(pid) for pid in pids)


def test_stop_escalates_to_sigkill_and_takes_children(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import signal, subprocess, sys, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"])
        print("child", child.pid, flush=True)
        time.sleep(60)
        """
    )
    log = tmp_path / "stubborn.log"
    proc = start_process([sys.executable, "-c", script], env=None, log_path=log)
    for _ in range(200):
        if "child" in log.read_text():
            break
        asyncio.run(asyncio.sleep(0.02))
    child = int(log.read_text().split()[1])
    assert len(group_members(proc.pid)) == 2
    stopped_by = asyncio.run(stop_process(proc, proc.pid, grace_s=0.3))
    assert stopped_by == "SIGKILL"
    assert _gone(proc.pid) and proc.returncode == -signal.SIGKILL
    assert _dead(child)  # the grandchild went with the group


def test_exception_and_cancellation_inside_launch_stop_the_engine(tmp_path: Path) -> None:
    pids: list[int] = []

    async def failing() -> None:
        async with SimEngine().launch(LaunchSpec(log_path=tmp_path / "a.log")) as handle:
            assert handle.pid is not None
            pids.append(handle.pid)
            raise RuntimeError("measurement blew up")

    with pytest.raises(RuntimeError):
        asyncio.run(failing())

    async def cancelled() -> None:
        async def body() -> None:
            async with SimEngine().launch(LaunchSpec(log_path=tmp_path / "b.log")) as handle:
                assert handle.pid is not None
                pids.append(handle.pid)
                await asyncio.sleep(60)

        task = asyncio.create_task(body())
        while len(pids) < 2:
            await asyncio.sleep(0.02)
        task.cancel()  # what Ctrl-C does to the main task
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert len(pids) == 2 and all(_gone(pid) for pid in pids)


def test_cancel_during_health_wait_leaves_nothing(tmp_path: Path) -> None:
    engine = ScriptEngine("import time; time.sleep(60)  # cancel-marker")
    log = tmp_path / "wait.log"
    seen: list[int] = []

    async def scenario() -> None:
        async def body() -> None:
            async with launch_process(engine, LaunchSpec(log_path=log, stop_grace_s=1.0)):
                pass

        task = asyncio.create_task(body())
        await asyncio.sleep(0.5)
        seen.extend(_script_pids(b"cancel-marker"))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert len(seen) == 1 and all(_gone(pid) for pid in seen)


def test_ports_free_taken_and_refused() -> None:
    port = free_port()
    assert port_is_free("127.0.0.1", port)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        assert not port_is_free("127.0.0.1", port)

        async def scenario() -> None:
            async with SimEngine().launch(LaunchSpec(port=port)):
                pass

        with pytest.raises(UserError, match=rf"^port: 127.0.0.1:{port} is already in use"):
            asyncio.run(scenario())


def test_registry_and_external_engine(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^engine: unknown engine 'tgi'; known: sim, external"):
        get_engine("tgi")
    assert normalize_url("http://h:1/v1/") == "http://h:1"
    with pytest.raises(UserError, match=r"^url: expected http://HOST:PORT, got 'localhost:8000'"):
        normalize_url("localhost:8000")

    async def scenario() -> tuple[str, str]:
        async with SimEngine().launch(LaunchSpec(log_path=tmp_path / "x.log")) as sim:
            spec = LaunchSpec(url=sim.url + "/v1")
            async with ExternalEngine().launch(spec) as handle:
                assert handle.pid is None and handle.alive()
                return handle.model, handle.url

    model, url = asyncio.run(scenario())
    assert model == "llama-3.1-8b" and not url.endswith("/v1")

    async def refused() -> None:
        spec = LaunchSpec(url=f"http://127.0.0.1:{free_port()}")
        async with ExternalEngine().launch(spec):
            pass

    with pytest.raises(EngineError, match=r"^url: cannot use http://127.0.0.1:"):
        asyncio.run(refused())


def test_parent_death_signal_stops_an_orphaned_engine(tmp_path: Path) -> None:
    """If budgettune is SIGKILLed, the engine it started gets SIGTERM from the kernel."""
    parent = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from budgettune.engines.process import start_process
        proc = start_process([sys.executable, "-c", "import time; time.sleep(60)"],
                             env=None, log_path=Path({str(tmp_path / "orphan.log")!r}))
        print(proc.pid, flush=True)
        time.sleep(60)
        """
    )
    with subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE) as holder:
        assert holder.stdout is not None
        engine_pid = int(holder.stdout.readline())
        assert group_members(engine_pid)
        holder.kill()  # budgettune dies without any chance to clean up
    for _ in range(100):
        if _gone(engine_pid):
            break
        asyncio.run(asyncio.sleep(0.02))
    assert _gone(engine_pid)
