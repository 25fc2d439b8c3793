"""A real sim-engine subprocess on a free loopback port, stopped by PID after the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import httpx
import pytest

from budgettune.engines.process import free_port, group_members


@contextmanager
def running_sim(args: list[str], log: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``python -m budgettune.engines.embedded`` with ``args``; yield (url, process). On
    a free port unless ``args`` names one with ``--port``."""
    port = int(args[args.index("--port") + 1]) if "--port" in args else free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "budgettune.engines.embedded",
                "--port",
                str(port),
                *args,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "sim server did not become healthy"
            time.sleep(0.05)
        yield url, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        assert not group_members(proc.pid)


SimHandle = tuple[str, "subprocess.Popen[bytes]"]


@pytest.fixture()
def sim_factory(tmp_path: Path) -> Callable[[list[str]], AbstractContextManager[SimHandle]]:
    """``with sim_factory([...flags]) as (url, proc):`` starts a server for one test."""
    counter = iter(range(1000))

    def start(args: list[str]) -> AbstractContextManager[SimHandle]:
        return running_sim(args, tmp_path / f"sim-{next(counter)}.log")

    return start


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One shared server (budget 512, max model len 4096) for the read-only endpoint tests."""
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    with running_sim(["--max-num-batched-tokens", "512", "--max-model-len", "4096"], log) as (
        url,
        _,
    ):
        yield url
