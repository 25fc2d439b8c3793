"""--request-timeout bounds a stall by data, not by bytes: a server that keeps a stream open with
SSE comments (": keepalive") and never sends a token fails the request as timed out, where
httpx's read timeout alone (restarted by any byte) would wait for ever."""

from __future__ import annotations

import asyncio

import httpx

from budgettune.loadgen.client import completion_request, stream_completion

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def _keepalive_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")  # the request's head; its body is not needed
    writer.write(STREAM_HEAD)
    try:
        while True:  # a comment every 50 ms, no data, never the end
            writer.write(chunk(b": keepalive\n\n"))
            await writer.drain()
            await asyncio.sleep(0.05)
    except (ConnectionError, asyncio.CancelledError):
        writer.close()


def test_a_stream_of_comments_alone_times_out() -> None:
    async def run() -> str | None:
        server = await asyncio.start_server(_keepalive_only, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            timeout = httpx.Timeout(0.5, connect=5.0)
            async with httpx.AsyncClient(timeout=timeout) as client:
                request = completion_request(
                    client, f"http://127.0.0.1:{port}/v1/completions", b"{}"
                )
                # a hang here fails the test instead of stalling the suite
                result = await asyncio.wait_for(stream_completion(client, request, 4), 30)
            return result.error
        finally:
            server.close()

    error = asyncio.run(run())
    assert error is not None and "no data for 0.5 s, only SSE comments" in error
