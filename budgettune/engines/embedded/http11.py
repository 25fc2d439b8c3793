"""A minimal HTTP/1.1 server on asyncio streams for the embedded engine: keep-alive, bodies by
Content-Length or chunked, responses with Content-Length or chunked transfer (for SSE).

Only what an OpenAI-compatible client needs; no framework, so the core stays dependency-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@dataclass(slots=True, frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class BadRequest(Exception):
    """The bytes on the wire were not HTTP we accept; answered with ``status`` and closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# A handler writes the whole response itself and returns False to close the connection.
Handler = Callable[[Request, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


def response_head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def write_body(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    *,
    content_type: str = "application/json",
    keep_alive: bool = True,
) -> None:
    """Write a complete response with a Content-Length body."""
    head = response_head(
        status,
        {
            "Content-Type": content_type,
            "Content-Length": str(len(body)),
            "Connection": "keep-alive" if keep_alive else "close",
        },
    )
    writer.write(head + body)


def write_json(
    writer: asyncio.StreamWriter, status: int, document: Any, *, keep_alive: bool = True
) -> None:
    write_body(writer, status, json.dumps(document).encode(), keep_alive=keep_alive)


def start_chunked(writer: asyncio.StreamWriter, content_type: str = "text/event-stream") -> None:
    """Send the head of a streamed (chunked transfer) response."""
    writer.write(
        response_head(
            200,
            {
                "Content-Type": content_type,
                "Transfer-Encoding": "chunked",
                "Cache-Control": "no-cache",
                "Connection": "keep-alive",
            },
        )
    )


def chunk(payload: bytes) -> bytes:
    """One chunk of a chunked body (an empty payload would end the body; use END_CHUNK)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


END_CHUNK = b"0\r\n\r\n"


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """Read one request; None when the client closed the connection between requests."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest(400, "incomplete request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise BadRequest(431, "request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, f"malformed request line {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(400, f"malformed header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    body = b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise BadRequest(400, "bad Content-Length") from None
        if length < 0 or length > MAX_BODY_BYTES:
            raise BadRequest(413, f"body of {length} bytes refused")
        body = await reader.readexactly(length)
    path = target.split("?", 1)[0]
    return Request(method.upper(), path, headers, body, keep_alive)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    total = 0
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest(400, "bad chunk size") from None
        if size == 0:
            # Skip trailers up to the blank line.
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass
            return b"".join(parts)
        total += size
        if total > MAX_BODY_BYTES:
            raise BadRequest(413, "chunked body too large")
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


async def serve_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler
) -> None:
    """Answer requests on one connection until the client or a handler closes it."""
    try:
        while True:
            try:
                request = await read_request(reader)
            except BadRequest as exc:
                write_json(
                    writer,
                    exc.status,
                    {
                        "object": "error",
                        "message": str(exc),
                        "type": "BadRequestError",
                        "param": None,
                        "code": exc.status,
                    },
                    keep_alive=False,
                )
                break
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if request is None:
                break
            if not await handler(request, reader, writer):
                break
            if not request.keep_alive:
                break
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()
