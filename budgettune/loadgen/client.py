"""The one async HTTP core: send one streaming completion over httpx and record the raw arrival
time (monotonic ns) and token count of every SSE chunk, the usage, the HTTP status and, on
failure, a short reason. Parsing is in :class:`SSEParser` so it is testable without a server.
Arrival times come from the socket reads when the client is built by
:func:`budgettune.loadgen.transport.async_client`, else from when the bytes reach this coroutine.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from budgettune.loadgen.transport import SEND_AT, arrival_ns, request_sent_ns

ERROR_TEXT_CHARS = 200


@dataclass(slots=True)
class StreamResult:
    """Raw outcome of one request. Times are ``time.monotonic_ns()`` values; ``sent_ns`` is when
    the request's first bytes were written to its socket (with the stamping transport), else
    when this coroutine began sending."""

    sent_ns: int
    http_status: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # one per token-bearing chunk
    chunk_tokens: list[int] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    done: bool = False  # saw data: [DONE]
    error: str | None = None
    cancelled: bool = False  # the caller cancelled it (an early stop, Ctrl-C), not the server

    @property
    def tokens(self) -> int:
        return sum(self.chunk_tokens)


class SSEParser:
    """Incremental parser of an OpenAI completions event stream.

    Token count per chunk: with ``continuous_usage_stats`` every chunk's usage gives the
    cumulative completion_tokens, so a chunk carrying k tokens counts k. Without usage in a
    chunk, a chunk with a choice counts 1 (all a client can know); the final usage then settles
    the total, and any tokens it reports beyond the counted ones are added to the last chunk.
    """

    __slots__ = ("_buffer", "_cumulative", "result")

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self._buffer = b""
        self._cumulative = 0

    def feed(self, data: bytes, arrival_ns: int) -> None:
        """Consume bytes received at ``arrival_ns``; every complete event is recorded with it."""
        buffer = self._buffer + data
        if b"\r" in buffer:  # the SSE spec allows CRLF line ends
            buffer = buffer.replace(b"\r\n", b"\n")
        events = buffer.split(b"\n\n")
        self._buffer = events.pop()
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._on_data(line[5:].strip(), arrival_ns)

    def _on_data(self, payload: bytes, arrival_ns: int) -> None:
        result = self.result
        if payload == b"[DONE]":
            result.done = True
            return
        try:
            message = json.loads(payload)
        except ValueError:
            result.error = result.error or f"bad SSE payload {payload[:80]!r}"
            return
        if "error" in message or message.get("object") == "error":
            detail = message.get("error", message)
            text = detail.get("message", detail) if isinstance(detail, dict) else detail
            result.error = result.error or f"server error in stream: {str(text)[:ERROR_TEXT_CHARS]}"
            return
        usage = message.get("usage")
        choices = message.get("choices") or []
        if usage:
            result.usage = usage
        if not choices:
            return  # the usage-only final chunk
        if usage and "completion_tokens" in usage:
            cumulative = int(usage["completion_tokens"])
            tokens = cumulative - self._cumulative
            self._cumulative = cumulative
        else:
            tokens = 1
            self._cumulative += 1
        if tokens > 0:
            result.chunk_ns.append(arrival_ns)
            result.chunk_tokens.append(tokens)

    def finish(self) -> None:
        """Settle the token count with the final usage when chunks carried none."""
        result = self.result
        if result.usage and result.chunk_tokens:
            reported = int(result.usage.get("completion_tokens", 0))
            if reported > self._cumulative:
                result.chunk_tokens[-1] += reported - self._cumulative
                self._cumulative = reported


def completion_body(
    model: str, prompt_ids: list[int], max_tokens: int, *, stream_usage: bool = True
) -> bytes:
    """The JSON body of one streaming completion forcing exactly ``max_tokens`` output tokens."""
    body: dict[str, object] = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
    }
    if stream_usage:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    return json.dumps(body, separators=(",", ":")).encode()


def _error_message(body: bytes) -> str:
    """The message of an OpenAI/vLLM-style JSON error, or the start of the body."""
    try:
        document = json.loads(body)
        detail = document.get("error", document)
        if isinstance(detail, dict) and "message" in detail:
            return str(detail["message"])[:ERROR_TEXT_CHARS]
    except (ValueError, AttributeError):
        pass
    return body[:ERROR_TEXT_CHARS].decode("utf-8", errors="replace")


HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


def completion_request(client: httpx.AsyncClient, url: str, body: bytes) -> httpx.Request:
    """The POST of ``body`` to ``url`` (…/v1/completions), built ahead of its send time so the
    send itself does as little as possible."""
    return client.build_request("POST", url, content=body, headers=HEADERS)


async def stream_completion(
    client: httpx.AsyncClient, request: httpx.Request, expected_tokens: int
) -> StreamResult:
    """Send ``request`` (from :func:`completion_request`) and record every chunk as it arrives.

    Never raises for a failed request: the reason is in ``error`` ("http 400: …", "connect error",
    "timeout", "stream cut", "short output 3/8"). A cancellation records "cancelled", sets
    ``cancelled`` and returns.
    """
    send_at = SEND_AT.get()  # held until then: a request never written counts as sent then
    result = StreamResult(sent_ns=max(time.monotonic_ns(), send_at.due_ns if send_at else 0))
    parser = SSEParser(result)
    try:
        response = await client.send(request, stream=True)
        try:
            result.http_status = response.status_code
            written_ns = request_sent_ns(response)
            if written_ns is not None:
                result.sent_ns = written_ns  # the request left when its bytes hit the socket
            if response.status_code != 200:
                text = await response.aread()
                result.error = f"http {response.status_code}: {_error_message(text)}"
                return result
            async for data in response.aiter_raw():
                parser.feed(data, arrival_ns(response))
        finally:
            await response.aclose()
        parser.finish()
    except asyncio.CancelledError:
        result.error = f"cancelled after {result.tokens} tokens"
        result.cancelled = True
        return result
    except httpx.ConnectError as exc:
        result.error = f"connect error: {exc}"[:ERROR_TEXT_CHARS]
        return result
    except httpx.TimeoutException as exc:
        result.error = f"timeout ({type(exc).__name__}) after {result.tokens} tokens"
        return result
    except httpx.HTTPError as exc:
        result.error = f"stream cut after {result.tokens} tokens: {type(exc).__name__}"
        return result
    if result.error is None:
        if not result.done and result.tokens < expected_tokens:
            result.error = f"stream cut after {result.tokens} tokens"
        elif result.tokens != expected_tokens:
            result.error = (
                f"short output {result.tokens}/{expected_tokens}"
                if (result.tokens < expected_tokens)
                else f"long output {result.tokens}/{expected_tokens}"
            )
    return result
