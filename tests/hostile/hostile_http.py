"""The hostile pass's fault on the embedded engine's HTTP server: bad chunks, a deep JSON body,
a slowloris, an idle flood, big bodies and a quoted model name (see :mod:`hostile_faults`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Sequence
from pathlib import Path

from hostile_faults import FaultOutcome, _connects, _finish, _start, _traceback, _wait_for


# --- the embedded engine's HTTP server ----------------------------------------------------------
def _send(port: int, data: bytes, *, wait_s: float = 3.0) -> tuple[bytes, float]:
    """Send ``data`` on a new connection; the answer's bytes until the server closes (or
    ``wait_s`` passes) and how long that took."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as conn:
        conn.sendall(data)
        out = b""
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                out += chunk
    return out, time.monotonic() - started


def http_server(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """The embedded engine against bad HTTP: a bad chunk size, a chunk longer than declared, a
    nested JSON body, a slowloris, 500 idle connections, four 60 MB bodies, a model name with
    a quote. Every one answered (400/413) or closed in time, memory flat, no traceback."""
    name = "embedded engine HTTP: bad chunks, deep JSON, slowloris, idle flood, big bodies"
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = _start(cmd, "serve", "--port", str(port), "--budget", "512",
                    "--served-model-name", 'my"model')  # fmt: skip
    problems: list[str] = []
    try:
        if not _wait_for(lambda: _connects(port), 30):
            return FaultOutcome(name, False, "the server did not start")
        post = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
        chunked = post + b"Transfer-Encoding: chunked\r\n\r\n"
        cases = {
            "bad chunk size": chunked + b"zz\r\nhello\r\n0\r\n\r\n",
            "chunk longer than declared": chunked + b"5\r\nhello-and-more\r\n0\r\n\r\n",
            "nested JSON body": post
            + b"Connection: close\r\nContent-Length: 100000\r\n\r\n"
            + b"[" * 100_000,
        }
        for label, data in cases.items():
            answer, took = _send(port, data)
            if not answer.startswith(b"HTTP/1.1 400") or took > 2.9:
                problems.append(f"{label}: {answer[:40]!r} after {took:.1f} s")
        rss_before = _rss_mib(server.pid)
        with socket.create_connection(("127.0.0.1", port)) as slow:  # slowloris
            started = time.monotonic()
            slow.settimeout(1.0)
            closed = False
            for byte in post.decode():
                try:
                    slow.sendall(byte.encode())
                    if slow.recv(1) == b"":
                        closed = True
                        break
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                    break
                if time.monotonic() - started > 15:
                    break
            if not closed:
                problems.append("a slowloris was held past 15 s")
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(500)]
        time.sleep(7)  # past the keep-alive timeout (5 s)
        still = 0
        for conn in idle:
            conn.setblocking(False)
            try:
                still += conn.recv(1) != b""
            except BlockingIOError:
                still += 1
            except OSError:
                pass
            conn.close()
        if still:
            problems.append(f"{still} of 500 idle connections still open after 7 s")
        big = post + b"Content-Length: 60000000\r\n\r\n"
        for _ in range(4):
            answer, _ = _send(port, big + b"1" * 1_000_000)
            if not answer.startswith(b"HTTP/1.1 413"):
                problems.append(f"a 60 MB body: {answer[:40]!r}")
        grown = _rss_mib(server.pid) - rss_before
        if grown > 64:
            problems.append(f"RSS grew {grown:.0f} MiB")
        body = b'{"prompt": [1, 2, 3], "max_tokens": 3, "stream": true}'
        head = post + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
        answer, _ = _send(port, head + body)
        events = [line[6:] for line in answer.split(b"\n") if line.startswith(b"data: {")]
        try:
            models = {json.loads(event)["model"] for event in events}
        except ValueError:
            models = set()
        if models != {'my"model'}:
            problems.append(f"stream chunks with a quoted model name: {events[:1]!r}")
    finally:
        os.killpg(server.pid, signal.SIGINT)
        log = _finish(server, 20)
    if _traceback(log):
        problems.append("a traceback in the server's log")
    return FaultOutcome(name, not problems, "; ".join(problems) or "all answered or closed")


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0
