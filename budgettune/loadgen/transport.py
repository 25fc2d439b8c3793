"""An httpcore network backend that stamps every socket read with its arrival time.

The stamp is taken in the event loop's read callback (``data_received``), before httpx parses
anything, so a burst of chunks from many streams gets the times they reached the socket, not
the times our single thread got around to each of them. :func:`async_client` builds an
``httpx.AsyncClient`` on it (plain http only; https keeps httpx's own backend), and
``response.extensions["network_stream"].last_arrival_ns`` gives the stamp of the bytes just read.
Timeouts use ``asyncio.timeout``, not ``wait_for``, which on Python 3.11 can swallow a
cancellation (Ctrl-C) that races with arriving data.

A request can be held at the socket until its time: set :data:`SEND_AT` (a :class:`SendTime`) in
the context of the task that sends it, start the send early, and httpx's work (the pool, a new
connection, serialising) is done before that time; only the write itself waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from budgettune.core.clock import sleep_until


@dataclass(slots=True)
class SendTime:
    """When a request's first bytes may go to the socket (monotonic ns), and how late the
    timer then woke (filled in by the write)."""

    due_ns: int
    late_s: float | None = None


SEND_AT: contextvars.ContextVar[SendTime | None] = contextvars.ContextVar(
    "budgettune_send_at", default=None
)


class _Protocol(asyncio.Protocol):
    """Buffers (arrival ns, bytes) per ``data_received``; wakes one waiting reader."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.chunks: deque[tuple[int, bytes]] = deque()
        self.eof = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.write_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append((time.monotonic_ns(), data))
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.error = exc
        self._wake()
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.drain_waiter is not None and not self.drain_waiter.done():
            self.drain_waiter.set_result(None)

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class TimestampedStream(httpcore.AsyncNetworkStream):
    """One TCP connection; ``last_arrival_ns`` is the arrival time of the last bytes read."""

    def __init__(self, protocol: _Protocol) -> None:
        self._protocol = protocol
        self.last_arrival_ns = time.monotonic_ns()
        # When the current request's first bytes went to the kernel: on HTTP/1.1 the first
        # write after any read starts a new request.
        self.request_sent_ns: int | None = None
        self._next_write_starts_request = True

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        protocol = self._protocol
        self._next_write_starts_request = True
        if not protocol.chunks and not protocol.eof:
            protocol.waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await protocol.waiter
            except TimeoutError:
                raise httpcore.ReadTimeout(f"no data for {timeout} s") from None
            finally:
                protocol.waiter = None
        if protocol.chunks:
            arrival_ns, data = protocol.chunks.popleft()
            if len(data) > max_bytes:
                protocol.chunks.appendleft((arrival_ns, data[max_bytes:]))
                data = data[:max_bytes]
            self.last_arrival_ns = arrival_ns
            return data
        if protocol.error is not None:
            raise httpcore.ReadError(str(protocol.error))
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        protocol = self._protocol
        if protocol.transport is None or protocol.transport.is_closing():
            raise httpcore.WriteError("connection closed")
        if self._next_write_starts_request:
            send_at = SEND_AT.get()
            if send_at is not None and send_at.late_s is None:
                send_at.late_s = await sleep_until(send_at.due_ns / 1e9)
                if protocol.transport.is_closing():  # the server closed it while we waited
                    raise httpcore.WriteError("connection closed")
            self.request_sent_ns = time.monotonic_ns()
            self._next_write_starts_request = False
        protocol.transport.write(buffer)
        if protocol.write_paused:
            protocol.drain_waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await protocol.drain_waiter
            except TimeoutError:
                raise httpcore.WriteTimeout(f"could not write for {timeout} s") from None

    async def aclose(self) -> None:
        if self._protocol.transport is not None:
            self._protocol.transport.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("TLS is not supported by the timestamping backend")

    def get_extra_info(self, info: str) -> Any:
        transport = self._protocol.transport
        if info == "is_readable":  # an idle keep-alive connection the server closed
            return bool(self._protocol.chunks) or self._protocol.eof
        if transport is None:
            return None
        names = {"socket": "socket", "client_addr": "sockname", "server_addr": "peername"}
        return transport.get_extra_info(names[info]) if info in names else None


class TimestampedBackend(httpcore.AsyncNetworkBackend):
    """TCP connections on the running asyncio loop, with per-read arrival stamps."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        local = (local_address, 0) if local_address else None
        try:
            async with asyncio.timeout(timeout):
                transport, protocol = await loop.create_connection(
                    _Protocol, host, port, local_addr=local
                )
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from None
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for option in socket_options or ():
                sock.setsockopt(*option)
        return TimestampedStream(protocol)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not supported by the timestamping backend")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def async_client(
    base_url: str,
    *,
    limits: httpx.Limits,
    timeout: httpx.Timeout,
    headers: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """An AsyncClient whose plain-http connections use :class:`TimestampedBackend`; ``headers``
    (an API key's Authorization) go with every request it sends."""
    transport = httpx.AsyncHTTPTransport(limits=limits)
    if base_url.startswith("http://") and hasattr(transport, "_pool"):
        # httpx has no public hook for the network backend; its pool is built from the same
        # limits, so swapping it changes only how sockets are read.
        transport._pool = httpcore.AsyncConnectionPool(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=TimestampedBackend(),
        )
    return httpx.AsyncClient(
        transport=transport, timeout=timeout, limits=limits, headers=dict(headers or {})
    )


def request_sent_ns(response: httpx.Response) -> int | None:
    """When the request behind ``response`` started going out on its socket (None without a
    stamped stream): later than the caller's send call by the connection setup, if any."""
    stream = response.extensions.get("network_stream")
    stamp = getattr(stream, "request_sent_ns", None)
    return stamp if isinstance(stamp, int) else None


def arrival_ns(response: httpx.Response) -> int:
    """Arrival time of the bytes ``response`` yielded last (now, without a stamped stream)."""
    stream = response.extensions.get("network_stream")
    stamp = getattr(stream, "last_arrival_ns", None)
    return stamp if isinstance(stamp, int) else time.monotonic_ns()
