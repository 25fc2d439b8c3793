"""The embedded engine's HTTP/1.1 server on asyncio streams. h11 does the framing (request
parsing, strict Content-Length, chunked bodies both ways, keep-alive, HEAD without a body); this
module adds the limits a server facing load generators needs (an idle keep-alive timeout, a
timeout for a request to arrive once begun, a cap on buffered bodies) and :class:`Exchange`,
through which a handler answers one request, whole or streamed chunk by chunk.

Streamed chunks are framed by h11 and written at once (asyncio sends them to the socket in the
same call when its buffer is empty, with TCP_NODELAY set), so a token leaves when it is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import h11

MAX_HEAD_BYTES = 64 * 1024  # request line and headers; past it h11 answers 431
MAX_BODY_BYTES = 64 * 1024 * 1024
READ_BYTES = 64 * 1024
# vLLM's --timeout-keep-alive default (uvicorn's too): an idle connection is closed after it.
DEFAULT_KEEP_ALIVE_TIMEOUT_S = 5.0
# budgettune's own: a request must arrive whole (head and body) this long after its first byte,
# so a client that stalls mid-request cannot hold a connection open forever.
DEFAULT_REQUEST_TIMEOUT_S = 10.0


@dataclass(slots=True, frozen=True)
class ConnectionLimits:
    """What one connection may cost: seconds idle between requests, seconds for a begun request
    to arrive, bytes of a buffered request body (past it: 413)."""

    keep_alive_timeout_s: float = DEFAULT_KEEP_ALIVE_TIMEOUT_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    max_body_bytes: int = MAX_BODY_BYTES


@dataclass(slots=True, frozen=True)
class Request:
    """One request as received: method upper-case, path without the query, header names
    lower-case (a repeated header keeps its last value), the whole body."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class _Refused(Exception):
    """A request answered with ``status`` and the connection closed (e.g. 413)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _head(status: int, headers: Sequence[tuple[str, str]]) -> h11.Response:
    return h11.Response(
        status_code=status, headers=list(headers), reason=HTTPStatus(status).phrase.encode()
    )


class Exchange:
    """One request and the answer to it on a keep-alive connection. The answer is either whole
    (:meth:`respond`) or streamed (:meth:`start_stream`, then :meth:`send_chunks`). An answer to
    HEAD carries the headers of the GET answer and no body."""

    __slots__ = ("_chunked", "_conn", "_reader", "_writer", "request")

    def __init__(
        self,
        request: Request,
        conn: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.request = request
        self._conn = conn
        self._reader = reader
        self._writer = writer
        self._chunked = False  # h11 chose chunked transfer for the streamed answer

    @property
    def answered(self) -> bool:
        """Whether the answer's head has been sent (so no other answer can be)."""
        return self._conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE)

    @property
    def client_gone(self) -> bool:
        """The client closed its side or the connection is closing."""
        return self._reader.at_eof() or self._writer.is_closing()

    @property
    def unsent_bytes(self) -> int:
        """Bytes written but not yet taken by the socket (a client that stopped reading)."""
        return self._writer.transport.get_write_buffer_size()

    def respond(
        self,
        status: int,
        body: bytes,
        *,
        content_type: str = "application/json",
        close: bool = False,
    ) -> None:
        """Send a whole answer with a Content-Length body (no body to HEAD)."""
        headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        if close:
            headers.append(("Connection", "close"))
        out = self._conn.send(_head(status, headers)) or b""
        if body and self.request.method != "HEAD":
            out += self._conn.send(h11.Data(data=body)) or b""
        out += self._conn.send(h11.EndOfMessage()) or b""
        self._writer.write(out)

    def respond_json(self, status: int, document: Any, *, close: bool = False) -> None:
        self.respond(status, json.dumps(document).encode(), close=close)

    def start_stream(self, content_type: str = "text/event-stream") -> None:
        """Send the head of a streamed answer (chunked transfer: no Content-Length)."""
        headers = [("Content-Type", content_type), ("Cache-Control", "no-cache")]
        head = self._conn.send(_head(200, headers)) or b""
        # h11 frames the body by the client's version: chunked for HTTP/1.1, to the close for 1.0.
        self._chunked = b"\r\ntransfer-encoding: chunked\r\n" in head.lower()
        self._writer.write(head)

    def send_chunks(self, payloads: Sequence[bytes], *, end: bool = False) -> None:
        """Write ``payloads`` as chunks of the streamed answer, and its end when ``end``, in one
        write: they leave now, not at the next await."""
        out: list[bytes] = []
        if self._chunked:
            # The one framing not left to h11, measured: its Data event cost ~30 us a chunk with
            # 100 streams, 3 ms an iteration, which pushed the core past its 5 ms catch-up window
            # and stretched every step (bench A's p50 TBT 28 -> 33 ms). A chunk is size, payload,
            # CRLF; h11 keeps no state per chunk of a chunked body, so its state machine stays
            # right, and the body's end still goes through h11.
            for payload in payloads:
                if payload:  # an empty chunk would end the body
                    out.append(b"%x\r\n%s\r\n" % (len(payload), payload))
        else:
            for payload in payloads:
                out += self._conn.send_with_data_passthrough(h11.Data(data=payload)) or ()
        if end:
            out.append(self._conn.send(h11.EndOfMessage()) or b"")
        self._writer.write(b"".join(out))


# A handler answers through the exchange and returns False to close the connection.
Handler = Callable[[Exchange], Awaitable[bool]]


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader, limits: ConnectionLimits
) -> Request | None:
    """The next whole request; None when the client closed between requests. Raises TimeoutError
    (idle too long, or the request too slow), h11.RemoteProtocolError (not HTTP we accept) or
    _Refused (a body past the cap)."""
    loop = asyncio.get_running_loop()
    # Until the request's first byte the keep-alive timeout runs; from it, the request timeout.
    begun_at = loop.time() if conn.trailing_data[0] else None
    head: h11.Request | None = None
    parts: list[bytes] = []
    size = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if begun_at is None:
                deadline = loop.time() + limits.keep_alive_timeout_s
            else:
                deadline = begun_at + limits.request_timeout_s
            async with asyncio.timeout_at(deadline):
                data = await reader.read(READ_BYTES)
            if begun_at is None and data:
                begun_at = loop.time()
            conn.receive_data(data)  # b"" is the client's EOF
        elif isinstance(event, h11.Request):
            head = event
            declared = dict(event.headers).get(b"content-length")
            if declared is not None and int(declared) > limits.max_body_bytes:  # h11: digits
                raise _Refused(413, f"a body of {int(declared)} bytes is over the limit")
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > limits.max_body_bytes:
                raise _Refused(413, f"a body over {limits.max_body_bytes} bytes")
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None  # h11 sends a Request before its end
            headers = {
                name.decode("latin-1"): value.decode("latin-1") for name, value in head.headers
            }
            path = head.target.decode("latin-1").split("?", 1)[0]
            return Request(head.method.decode("ascii").upper(), path, headers, b"".join(parts))
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # PAUSED cannot come: a new cycle starts only after both sides are done
            raise h11.RemoteProtocolError(f"unexpected {event!r}", error_status_hint=400)


def _refuse(conn: h11.Connection, writer: asyncio.StreamWriter, status: int, message: str) -> None:
    """Answer a request we could not accept, as vLLM words errors, and mark the connection to
    close; nothing when an answer has already begun."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = json.dumps(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None,
         "code": status}
    ).encode()  # fmt: skip
    headers = [
        ("Content-Type", "application/json"),
        ("Content-Length", str(len(body))),
        ("Connection", "close"),
    ]
    with contextlib.suppress(h11.LocalProtocolError):
        writer.write(
            (conn.send(_head(status, headers)) or b"")
            + (conn.send(h11.Data(data=body)) or b"")
            + (conn.send(h11.EndOfMessage()) or b"")
        )


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handler: Handler,
    limits: ConnectionLimits | None = None,
) -> None:
    """Answer requests on one connection until the client or a handler closes it, it idles past
    the keep-alive timeout, or a request breaks the rules (answered 400, 413 or 431, closed)."""
    limits = limits or ConnectionLimits()
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            try:
                request = await _read_request(conn, reader, limits)
            except h11.RemoteProtocolError as exc:
                _refuse(conn, writer, exc.error_status_hint, str(exc))
                break
            except _Refused as exc:
                _refuse(conn, writer, exc.status, str(exc))
                break
            except TimeoutError:
                break  # idle, or a request too slow to arrive: close, as uvicorn does
            if request is None:
                break
            if not await handler(Exchange(request, conn, reader, writer)):
                break
            # Keep the connection only after a whole answer to a whole request (h11 says
            # MUST_CLOSE for Connection: close, HTTP/1.0 clients or an answer cut short).
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                break
            await writer.drain()
            conn.start_next_cycle()
    except (ConnectionError, h11.LocalProtocolError):
        pass
    except asyncio.CancelledError:
        # The server is stopping (a connection kept alive, or a stream cut at shutdown). End as a
        # closed connection: on Python 3.11 asyncio.start_server logs a handler task that ends
        # cancelled as "Exception in callback" with a CancelledError traceback in the engine log.
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()  # flushes what is buffered, then closes
