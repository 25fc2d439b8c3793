"""Faults a sweep or a replay must survive, kept as tests: a full disk at any moment (a real
tmpfs filled to the last byte), a server that accepts and never answers, a port another server
answers on, every engine failing, and the inputs a CliRunner cannot stand in for (a pipe, a
FIFO). ``scripts/hostile_pass.py`` runs more of them, at more moments."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_cases import Case, Kind
from hostile_faults import _connects, disk_full_at, silent_server, tmpfs
from hostile_setup import Fixtures, judge, prepare
from hostile_table import CASES
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.core.errors import EngineError
from budgettune.engines import external
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.process import free_port, launch_process

PROCESS_CASES = [case for case in CASES if case.kind is Kind.PROCESS]
# Beside test_hostile_inputs on one xdist worker: their session fixture (a finished sweep, about
# 12 s) is made once (scripts/test-fast.sh runs --dist loadgroup).
pytestmark = pytest.mark.xdist_group("hostile-fixtures")


@pytest.mark.parametrize("case", PROCESS_CASES, ids=lambda case: case.id)
def test_inputs_that_need_a_process(
    case: Case, tmp_path: Path, fixtures: Fixtures, budgettune_cmd: list[str]
) -> None:
    """A trace on a pipe or a FIFO (read once), a host that does not resolve."""
    folder = tmp_path / "case"
    argv, writers = prepare(case, folder, fixtures)
    done = subprocess.run(
        [*budgettune_cmd, *argv], input=case.stdin, capture_output=True, timeout=60, cwd=folder
    )
    for writer in writers:
        writer.join(timeout=1)
    verdict = judge(case, done.returncode, (done.stdout + done.stderr).decode())
    assert verdict.clean, f"{verdict.outcome}: {verdict.detail}"


def test_a_trace_on_a_pipe_is_read_once(tmp_path: Path, budgettune_cmd: list[str]) -> None:
    trace = b"".join(
        b'{"arrival_s": %d, "prompt_tokens": 10, "output_tokens": 4}\n' % i for i in range(50)
    )
    done = subprocess.run(
        [*budgettune_cmd, "trace", "inspect", "/dev/stdin", "--json"],
        input=trace,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b'"requests": 50' in done.stdout


def _can_mount() -> bool:
    with tmpfs(Path("/tmp") / f"budgettune-mount-check-{os.getpid()}", "1m") as disk:
        return disk is not None


@pytest.mark.slow
def test_a_disk_that_fills_mid_sweep_loses_no_point(
    tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    """The disk fills 2.5 s into the first replay (its results.json, its points.jsonl line and
    everything after it hit ENOSPC): exit 1 in one line, no temporary or half-written file, and
    after space is freed --resume finds every point the run finished."""
    if not _can_mount():
        if os.environ.get("CI") == "true":
            pytest.fail("CI must be able to mount a tmpfs (root) for the full-disk test")
        pytest.skip("mounting a tmpfs needs root; tests/core/test_files.py covers the mechanism")
    outcome = disk_full_at(2.5, budgets="256")(tmp_path, budgettune_cmd)
    assert outcome.ok, outcome.detail
    assert outcome.points_lost == 0


def test_a_server_that_never_answers_fails_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each check waits CHECK_TIMEOUT_S (10 s; 0.5 s here) and says what got no answer, never
    a blank "ReadTimeout:"; the sweep exits 1 at its first question to the server."""
    monkeypatch.setattr(external, "CHECK_TIMEOUT_S", 0.5)
    with silent_server() as port:
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"no answer to GET /health within 0 s|within"):
            external.ask_server_budget(url, None)
        runner = CliRunner()
        result = runner.invoke(app, ["sweep", "--url", url, "--slo-tbt", "50ms"])
        assert result.exit_code == 1, result.output
        assert "no answer to GET /health" in result.output
        assert "ReadTimeout: \n" not in result.output
        replay = runner.invoke(app, ["replay", "--url", url, "--requests", "5", "--rate", "5"])
        assert replay.exit_code == 1, replay.output
        assert "no answer to GET /v1/models" in replay.output
        assert time.monotonic() - started < 15


def test_budgets_are_refused_with_a_server_you_run() -> None:
    result = CliRunner().invoke(
        app, ["sweep", "--url", "http://127.0.0.1:1", "--slo-tbt", "50ms", "--budgets", "512"]
    )
    assert result.exit_code == 2
    assert "--budgets: not with --url" in result.output


def test_every_engine_failing_exits_1_not_3(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["sweep", "--engine", "sim", "--engine-cmd", "false", "--budgets", "256,512",
         "--baseline", "none", "--requests", "10", "--slo-tbt", "50ms", "-o", str(tmp_path / "r")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "no budget was measured: every engine failed (2 launch(es))" in result.output


def test_a_port_another_server_answers_on_is_refused(tmp_path: Path) -> None:
    """A dual-stack server on :: leaves 127.0.0.1:P bindable, yet it answers there: the port
    is refused before the launch (it connects), and nothing is measured."""
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "::", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _connects(port):
            assert other.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        result = CliRunner().invoke(
            app,
            ["replay", "--engine", "sim", "--port", str(port), "--requests", "5", "--rate", "5",
             "-o", str(tmp_path / "r")],
        )  # fmt: skip
        assert result.exit_code == 2, result.output
        assert f"--port: 127.0.0.1:{port} is already in use" in result.output
        assert not (tmp_path / "r" / "results.json").exists()
    finally:
        other.send_signal(2)
        other.wait(20)


def test_an_engine_whose_port_another_server_answers_is_not_measured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    """When another server takes the port between the check and the engine's bind, the health
    check reaches it: the launch sees that no process of the engine listens there."""
    from budgettune.engines import process

    port = free_port()
    other = subprocess.Popen(
        [*budgettune_cmd, "serve", "--port", str(port), "--budget", "512"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not _connects(port):
            assert other.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        monkeypatch.setattr(process, "port_is_free", lambda host, port: True)  # the race
        spec = LaunchSpec(
            port=port,
            engine_cmd=(sys.executable, "-c", "import time; time.sleep(60)"),
            log_path=tmp_path / "engine.log",
            health_timeout_s=20,
        )

        async def launch() -> None:
            async with launch_process(SimEngine(), spec):
                raise AssertionError("measured another server")

        with pytest.raises(EngineError, match=f"another server answers on 127.0.0.1:{port}"):
            asyncio.run(launch())
    finally:
        other.send_signal(2)
        other.wait(20)


def test_listening_sockets_are_found_by_group() -> None:
    from budgettune.engines.process import group_listens

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert group_listens(os.getpgid(0), port) is True
    assert group_listens(os.getpgid(0), port) is False


@pytest.mark.slow
def test_a_server_you_run_is_measured_as_its_one_budget(
    tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    """A sweep with --url measures the server's own budget, read from its /server_info, and
    labels nothing else with it (before: every candidate was "measured" on the one server and
    vllm.yaml recommended a budget that never ran). A budget the server contradicts is refused."""
    port = free_port()
    server = subprocess.Popen(
        [*budgettune_cmd, "serve", "--port", str(port), "--budget", "768"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while not _connects(port):
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        runner = CliRunner()
        asked = ["sweep", "--url", url, "--slo-tbt", "200ms", "--baseline", "1024"]
        wrong = runner.invoke(app, [*asked, "-o", str(tmp_path / "wrong")])
        assert wrong.exit_code == 2, wrong.output
        assert "runs budget 768 (its /server_info), not 1024" in wrong.output
        run = tmp_path / "run"
        result = runner.invoke(
            app,
            ["sweep", "--url", url, "--slo-tbt", "200ms", "--slo-ttft", "10s", "--requests", "12",
             "--rate", "4", "-o", str(run)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "server budget 768 (its /server_info): measured as it runs" in result.output
        points = [line for line in (run / "points.jsonl").read_text().splitlines() if line]
        assert len(points) == 1 and '"budget": 768' in points[0]
        assert "max-num-batched-tokens: 768" in (run / "vllm.yaml").read_text()
    finally:
        server.send_signal(2)
        server.wait(20)
