"""``python -m budgettune.engines.embedded``'s own CLI: its settings name fields, and the CLI shows
a field as its own flag (the flags mirror ``vllm serve``), one line, exit 2."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from budgettune.core.errors import SpecError
from budgettune.engines.embedded.cli import config_from_args, flag_of, main
from budgettune.engines.embedded.config import SimServerConfig
from budgettune.engines.process import group_members


def test_config_names_the_field() -> None:
    with pytest.raises(SpecError, match=r"^time_scale: must be positive, got 0") as caught:
        SimServerConfig(time_scale=0)
    assert caught.value.field == "time_scale"
    with pytest.raises(SpecError, match=r"^stream_interval: must be at least 1, got 0"):
        SimServerConfig(stream_interval=0)


def test_flags_for_fields() -> None:
    assert flag_of("time_scale") == "--time-scale"
    assert flag_of("budget_tokens") == "--max-num-batched-tokens"
    assert flag_of("max_model_len") == "--max-model-len"
    assert flag_of("kv_capacity_blocks") == "kv_capacity_blocks"  # no flag: the bare field
    assert flag_of(None) is None


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--time-scale", "0"], "error: --time-scale: must be positive, got 0"),
        (["--stream-interval", "0"], "error: --stream-interval: must be at least 1, got 0"),
        (["--max-model-len", "1"], "error: --max-model-len: must be at least 2 tokens, got 1"),
        (["--gpu", "nope"], "error: --gpu: unknown GPU preset 'nope'"),
        (["--timeout-request", "0"], "error: --timeout-request: must be positive, got 0"),
        (["--timeout-keep-alive", "-1"], "error: --timeout-keep-alive: must be positive, got -1"),
    ],
)
def test_errors_name_this_cli_s_flag(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1, err


def test_flags_map_to_the_config() -> None:
    config = config_from_args(
        ["--max-num-batched-tokens", "512", "--max-num-seqs", "8", "--time-scale", "2",
         "--no-enable-chunked-prefill", "--served-model-name", "m"]
    )  # fmt: skip
    assert config.budget_tokens is None  # no chunking: no budget at all
    assert (config.max_num_seqs, config.time_scale, config.served_model_name) == (8, 2.0, "m")
    assert config_from_args(["--max-num-batched-tokens", "512"]).budget_tokens == 512
    # No budget: the engine-default rule for the GPU (vLLM's 8192 on an H100).
    assert config_from_args([]).budget_tokens == 8192


def test_api_key_flag_then_vllm_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert config_from_args([]).api_key is None
    monkeypatch.setenv("VLLM_API_KEY", "")  # empty: no key, as vLLM
    assert config_from_args([]).api_key is None
    monkeypatch.setenv("VLLM_API_KEY", "from-env")
    assert config_from_args([]).api_key == "from-env"
    assert config_from_args(["--api-key", "flag"]).api_key == "flag"
    assert "flag" not in repr(config_from_args(["--api-key", "flag"]))


def _serve_on_port_0(
    budgettune_cmd: list[str], log: Path
) -> tuple[subprocess.Popen[bytes], re.Match[str]]:
    """`budgettune serve --port 0` in a process group of its own, its output in ``log``; returns
    once it prints where it serves (the match: URL, port)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*budgettune_cmd, "serve", "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + 60
    try:
        while (
            found := re.search(r"serving on (http://127\.0\.0\.1:(\d+))/v1", log.read_text())
        ) is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        raise
    return proc, found


def test_serve_on_port_0_prints_the_port_it_got(budgettune_cmd: list[str], tmp_path: Path) -> None:
    # Before: "serving on http://127.0.0.1:0/v1", an address no client can use.
    proc, found = _serve_on_port_0(budgettune_cmd, tmp_path / "serve.log")
    try:
        assert int(found.group(2)) > 0
        assert httpx.get(f"{found.group(1)}/health", timeout=10).status_code == 200
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(10)
    assert not group_members(proc.pid)


def test_stopping_with_a_connection_open_logs_no_traceback(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """SIGTERM while a client holds a keep-alive connection: the server stops and its log ends
    with its summary line, not a CancelledError traceback (Python 3.11's start_server logs a
    connection task that ends cancelled as an error)."""
    log = tmp_path / "serve.log"
    proc, found = _serve_on_port_0(budgettune_cmd, log)
    try:
        with socket.create_connection(("127.0.0.1", int(found.group(2))), timeout=10) as idle:
            idle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert idle.recv(4096).startswith(b"HTTP/1.1 200")
            # the connection stays open (keep-alive) while the server is stopped
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = log.read_text()
    assert "Traceback" not in text and "CancelledError" not in text, text[-3000:]
    assert "stopped; iterations:" in text, text[-3000:]
