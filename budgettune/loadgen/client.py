"""The one async HTTP core: send one streaming completion (``/v1/completions``) or chat completion
(``/v1/chat/completions``) over httpx and record the raw arrival time (monotonic ns) and token
count of every SSE chunk, the usage, the HTTP status and, on failure, a short reason. Parsing is
in :class:`SSEParser` so it is testable without a server. Arrival times come from the socket
reads when the client is built by :func:`budgettune.loadgen.transport.async_client`, else from
when the bytes reach this coroutine.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from enum import StrEnum

import httpx

from budgettune.loadgen.transport import SEND_AT, arrival_ns, request_sent_ns

ERROR_TEXT_CHARS = 200


class Endpoint(StrEnum):
    """Which OpenAI API the requests use: ``completions`` (token-id prompts) or ``chat``."""

    COMPLETIONS = "completions"
    CHAT = "chat"

    @property
    def path(self) -> str:
        return "/v1/chat/completions" if self is Endpoint.CHAT else "/v1/completions"


# A chat message is text, so a prompt of N tokens is N words, each a leading space and three
# letters: one token in common BPE vocabularies (Llama 3, Qwen, GPT), and 4 UTF-8 bytes, which
# the embedded engine counts as one token. The server's chat template adds its own few tokens
# (its usage.prompt_tokens says how many).
CHAT_WORDS = (
    " the", " and", " for", " you", " are", " not", " was", " but", " all", " can", " had",
    " her", " one", " our", " out", " day", " get", " has", " him", " his", " how", " man",
    " new", " now", " old", " see", " two", " way", " who", " boy", " did", " its", " let",
    " put", " say", " she", " too", " use",
)  # fmt: skip


@dataclass(slots=True)
class StreamResult:
    """Raw outcome of one request. Times are ``time.monotonic_ns()`` values; ``sent_ns`` is when
    the request's first bytes were written to its socket (with the stamping transport), else
    when this coroutine began sending."""

    sent_ns: int
    http_status: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # one per token-bearing chunk
    chunk_tokens: list[int] = field(default_factory=list)
    usage: dict[str, object] | None = None  # the server's usage object, as sent
    done: bool = False  # saw data: [DONE]
    error: str | None = None
    cancelled: bool = False  # the caller cancelled it (an early stop, Ctrl-C), not the server
    finished_ns: int | None = None  # when its stream ended (the last bytes arrived)

    @property
    def tokens(self) -> int:
        return sum(self.chunk_tokens)


class SSEParser:
    """Incremental parser of an OpenAI completions or chat completions event stream.

    Token count per chunk: with ``continuous_usage_stats`` every chunk's usage gives the
    cumulative completion_tokens, so a chunk carrying k tokens counts k. Without usage in a
    chunk (the default: asking for it loads the server), each chunk with a choice counts 1, as
    vLLM sends one chunk per new token (its text may be empty, a partial UTF-8 character); a
    chat stream's first chunk, which carries only the assistant's role, counts 0. The final
    usage (``include_usage``) then settles the total: tokens it reports beyond the counted ones
    are added to the last chunk (a merged chunk), and counted chunks beyond it are dropped from
    the end when their text was empty (SGLang closes with an empty chunk for finish_reason).
    """

    __slots__ = ("_buffer", "_cumulative", "_empty", "_usage_counted", "data_events", "result")

    def __init__(self, result: StreamResult) -> None:
        self.result = result
        self.data_events = 0  # data lines seen: SSE comments (": keepalive") are not progress
        self._buffer = b""
        self._cumulative = 0
        self._empty: list[bool] = []  # per recorded chunk: its text was empty
        self._usage_counted = False  # some chunk's usage gave the cumulative count

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
        self.data_events += 1
        result = self.result
        if payload == b"[DONE]":
            result.done = True
            return
        try:
            message = json.loads(payload)
        except ValueError:
            result.error = result.error or f"bad SSE payload {payload[:80]!r}"
            return
        if not isinstance(message, dict):
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
        choice = choices[0] if isinstance(choices[0], dict) else {}
        delta = choice.get("delta")
        if isinstance(delta, dict):  # chat
            content = delta.get("content")
            role_only = "role" in delta and not content
        else:  # completions
            content, role_only = choice.get("text"), False
        if usage and "completion_tokens" in usage:
            cumulative = int(usage["completion_tokens"])
            tokens = cumulative - self._cumulative
            self._cumulative = cumulative
            self._usage_counted = True
        elif role_only:
            tokens = 0
        else:
            tokens = 1
            self._cumulative += 1
        if tokens > 0:
            result.chunk_ns.append(arrival_ns)
            result.chunk_tokens.append(tokens)
            self._empty.append(not content)

    def finish(self) -> None:
        """Settle the token count with the final usage when chunks carried none."""
        result = self.result
        if not result.usage or not result.chunk_tokens:
            return
        sent = result.usage.get("completion_tokens")
        if not isinstance(sent, int):
            return
        if sent > self._cumulative:
            result.chunk_tokens[-1] += sent - self._cumulative
            self._cumulative = sent
            return
        while (
            not self._usage_counted
            and self._cumulative > sent
            and self._empty
            and self._empty[-1]
            and result.chunk_tokens[-1] == 1
        ):
            result.chunk_ns.pop()
            result.chunk_tokens.pop()
            self._empty.pop()
            self._cumulative -= 1


def prompt_text(prompt_ids: list[int]) -> str:
    """The chat message for a prompt of ``len(prompt_ids)`` tokens: one :data:`CHAT_WORDS` word
    per id (so prompts that share ids share words, and a prefix group its prefix)."""
    return "".join(CHAT_WORDS[token % len(CHAT_WORDS)] for token in prompt_ids)


def request_body(
    endpoint: Endpoint,
    model: str,
    prompt: list[int] | str,
    max_tokens: int,
    *,
    stream_usage: bool = True,
    continuous_usage: bool = False,
) -> bytes:
    """The JSON body of one streaming (chat) completion forcing exactly ``max_tokens`` output
    tokens (``ignore_eos``). ``prompt``: token ids, or text (a chat message from ids is one
    :data:`CHAT_WORDS` word per id). ``stream_usage`` asks for the final usage chunk;
    ``continuous_usage`` also for usage in every chunk (vLLM's ``continuous_usage_stats``:
    exact tokens per chunk, but measurably more work for the server)."""
    body: dict[str, object] = {"model": model}
    if endpoint is Endpoint.CHAT:
        content = prompt if isinstance(prompt, str) else prompt_text(prompt)
        body["messages"] = [{"role": "user", "content": content}]
    else:
        body["prompt"] = prompt
    body.update(max_tokens=max_tokens, ignore_eos=True, temperature=0.0, stream=True)
    if stream_usage or continuous_usage:
        options: dict[str, bool] = {"include_usage": True}
        if continuous_usage:
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
    return json.dumps(body, separators=(",", ":")).encode()


def _error_message(body: bytes) -> str:
    """The message of an OpenAI/vLLM-style JSON error (``{"error": {"message": ...}}``, or
    ``{"error": "..."}``), or the start of the body."""
    try:
        document = json.loads(body)
        detail = document.get("error", document)
        if isinstance(detail, dict) and "message" in detail:
            return str(detail["message"])[:ERROR_TEXT_CHARS]
        if isinstance(detail, str):  # vLLM's 401: {"error": "Unauthorized"}
            return detail[:ERROR_TEXT_CHARS]
    except (ValueError, AttributeError):
        pass
    return body[:ERROR_TEXT_CHARS].decode("utf-8", errors="replace")


HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}


def completion_request(client: httpx.AsyncClient, url: str, body: bytes) -> httpx.Request:
    """The POST of ``body`` to ``url`` (…/v1/completions or …/v1/chat/completions), built ahead
    of its send time so the send itself does as little as possible. The client's own headers
    (the API key) go with it."""
    return client.build_request("POST", url, content=body, headers=HEADERS)


async def stream_completion(
    client: httpx.AsyncClient, request: httpx.Request, expected_tokens: int
) -> StreamResult:
    """Send ``request`` (from :func:`completion_request`) and record every chunk as it arrives.

    Never raises for a failed request: the reason is in ``error`` ("http 401: …", "connect error",
    "timeout", "stream cut", "short output 3/8"). A cancellation records "cancelled", sets
    ``cancelled`` and returns. ``finished_ns`` is when the stream's last bytes arrived (or when
    the failure was seen).
    """
    send_at = SEND_AT.get()  # held until then: a request never written counts as sent then
    result = StreamResult(sent_ns=max(time.monotonic_ns(), send_at.due_ns if send_at else 0))
    await _stream(client, request, result)
    if result.finished_ns is None:
        result.finished_ns = time.monotonic_ns()
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


async def _stream(client: httpx.AsyncClient, request: httpx.Request, result: StreamResult) -> None:
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
                return
            # --request-timeout bounds a stall: httpx's read timeout restarts on any bytes,
            # so a server sending only SSE comments (": keepalive") is timed here, by data.
            stall_ns = int(client.timeout.read * 1e9) if client.timeout.read else None
            last_data_ns, seen = time.monotonic_ns(), 0
            async for data in response.aiter_raw():
                now_ns = arrival_ns(response)
                parser.feed(data, now_ns)
                if parser.data_events != seen:
                    last_data_ns, seen = now_ns, parser.data_events
                elif stall_ns is not None and now_ns - last_data_ns > stall_ns:
                    result.error = (
                        f"timeout (no data for {stall_ns / 1e9:g} s, only SSE comments) after "
                        f"{result.tokens} tokens"
                    )
                    result.finished_ns = now_ns
                    return
            result.finished_ns = arrival_ns(response)
        finally:
            await response.aclose()
        parser.finish()
    except asyncio.CancelledError:
        result.error = f"cancelled after {result.tokens} tokens"
        result.cancelled = True
    except httpx.ConnectError as exc:
        result.error = f"connect error: {exc}"[:ERROR_TEXT_CHARS]
    except httpx.TimeoutException as exc:
        result.error = f"timeout ({type(exc).__name__}) after {result.tokens} tokens"
    except httpx.HTTPError as exc:
        result.error = f"stream cut after {result.tokens} tokens: {type(exc).__name__}"
