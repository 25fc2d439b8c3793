"""A minimal Chrome DevTools Protocol driver for the browser tests: launch headless Chromium with
the network refused, speak CDP over a stdlib websocket, and stop the browser by process group.

No test dependency beyond the standard library: the websocket client below handles exactly what
CDP needs (masked text frames out, text/continuation/ping/close frames in).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

# Everything that could reach the network is off or points at a dead end: a proxy on the
# discard port for every URL (loopback included: "<-loopback>"), and a resolver that finds no
# host. file:// pages still load.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--mute-audio",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


class WebSocket:
    """Blocking RFC 6455 client, text frames only, enough for CDP on 127.0.0.1."""

    def __init__(self, host: str, port: int, path: str, timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        status, _, self._buffer = head.partition(b"\r\n\r\n")
        if b" 101 " not in status.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"websocket handshake refused: {status[:200]!r}")

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])  # FIN + text
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ConnectionError("websocket closed")
            self._buffer += chunk
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def recv(self) -> str:
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8))
            if b1 & 0x80:  # servers do not mask, but tolerate it
                mask = self._read(4)
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self._read(n)))
            else:
                payload = self._read(n)
            if opcode == 0x8:
                raise ConnectionError("websocket closed by the browser")
            if opcode == 0x9:  # ping -> pong
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode in (0x1, 0x0):
                parts.append(payload)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@dataclass
class Browser:
    """One headless Chromium, its CDP connection and one page session; events are collected."""

    process: subprocess.Popen[bytes]
    ws: WebSocket
    session: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 0

    def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        page: bool = True,
        timeout_s: float = 60.0,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if page and self.session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"CDP {method}: {reply['error']}")
                return dict(reply.get("result", {}))
            self._on_event(reply)
        raise TimeoutError(f"CDP {method}: no answer in {timeout_s} s")

    def _on_event(self, event: dict[str, Any]) -> None:
        if "method" not in event:
            return
        self.events.append(event)
        if event["method"] == "Page.javascriptDialogOpening":
            # Dismiss at once, else the page blocks; the test looks at the recorded event.
            self.ws.send(
                json.dumps(
                    {
                        "id": 10**9 + len(self.events),
                        "method": "Page.handleJavaScriptDialog",
                        "params": {"accept": False},
                        "sessionId": self.session,
                    }
                )
            )

    def open_page(self, width: int = 1200, height: int = 900) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"}, page=False)
        attached = self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, page=False
        )
        self.session = attached["sessionId"]
        for domain in ("Network", "Page", "Runtime"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def navigate(self, url: str, timeout_s: float = 60.0) -> None:
        start = len(self.events)
        self.call("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(e["method"] == "Page.loadEventFired" for e in self.events[start:]):
                return
            self.evaluate("1")  # pumps events
            time.sleep(0.05)
        raise TimeoutError(f"{url}: no load event in {timeout_s} s")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate {expression[:80]!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics["cssContentSize"]
        shot = self.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {
                    "x": 0,
                    "y": 0,
                    "width": size["width"],
                    "height": size["height"],
                    "scale": 1,
                },
            },
        )
        path.write_bytes(base64.b64decode(shot["data"]))

    def requested_urls(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]

    def events_named(self, method: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["method"] == method]


def launch(executable: str, user_data_dir: Path, *, timeout_s: float = 60.0) -> Browser:
    """Start headless Chromium in its own process group and connect to its browser endpoint."""
    user_data_dir.mkdir(parents=True, exist_ok=True)
    log_path = user_data_dir / "chromium.log"
    with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={user_data_dir}", "about:blank"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    port_file = user_data_dir / "DevToolsActivePort"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if port_file.exists():
                lines = port_file.read_text().split()
                if len(lines) >= 2:
                    break
            if process.poll() is not None:
                raise RuntimeError(f"chromium exited with {process.returncode}: see {log_path}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium wrote no DevToolsActivePort in {timeout_s} s")
            time.sleep(0.05)
        ws = WebSocket("127.0.0.1", int(lines[0]), lines[1])
    except BaseException:
        stop(process)
        raise
    return Browser(process, ws)


def stop(process: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """Stop Chromium and its helpers: SIGTERM to its process group, then SIGKILL."""
    if process.poll() is None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=grace_s)
                break
            except subprocess.TimeoutExpired:
                continue
    else:  # the leader is gone; its helpers may not be
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def close(browser: Browser) -> None:
    with contextlib.suppress(OSError, RuntimeError, TimeoutError, ConnectionError):
        browser.call("Browser.close", page=False, timeout_s=5.0)
    browser.ws.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        browser.process.wait(timeout=5.0)
    stop(browser.process)


CHART_STATE_JS = """
JSON.stringify(Array.from(document.querySelectorAll('.js-plotly-plot')).map(function (gd) {
  return {id: gd.id,
          svgs: gd.querySelectorAll('.main-svg').length,
          traces: gd.querySelectorAll('.main-svg g.trace').length,
          marks: gd.querySelectorAll('.main-svg g.trace path, .main-svg g.trace .point').length,
          data: (gd.data || []).length};
}))
"""


def chart_state(browser: Browser) -> dict[str, dict[str, int]]:
    """Per plotly chart div id: SVG containers, drawn trace groups, drawn marks, data traces."""
    rows = json.loads(browser.evaluate(CHART_STATE_JS) or "[]")
    return {row["id"]: row for row in rows}
