"""The bytes of the embedded engine's answers, as vLLM writes them: /v1/completions
(``text_completion`` objects) and /v1/chat/completions (``chat.completion.chunk`` objects, after
vLLM's ``chat_completion/serving.py``: a first chunk with ``delta.role`` and empty content, one
chunk per write with ``delta.content``, ``finish_reason`` and ``stop_reason`` on the last, then an
optional usage chunk with empty ``choices``). Built as bytes, not through json.dumps: this runs
for every token at thousands of tokens per second."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass


class Endpoint(enum.Enum):
    COMPLETIONS = "/v1/completions"
    CHAT = "/v1/chat/completions"


@dataclass(slots=True, frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def json(self) -> bytes:
        # vLLM's UsageInfo field order.
        return b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
            self.prompt_tokens,
            self.prompt_tokens + self.completion_tokens,
            self.completion_tokens,
        )


class Wire:
    """One request's answer bytes; ``prefix`` is what every object of the answer starts with."""

    __slots__ = ("chat", "prefix")

    def __init__(self, endpoint: Endpoint, rid: int, created: int, model: str) -> None:
        self.chat = endpoint is Endpoint.CHAT
        kind, obj = (
            (b"chatcmpl", b"chat.completion.chunk") if self.chat else (b"cmpl", b"text_completion")
        )
        # The model name is the user's (--model '/x/my"model'): JSON-escaped, quotes included.
        self.prefix = b'{"id":"%s-%d","object":"%s","created":%d,"model":%s,' % (
            kind,
            rid,
            obj,
            created,
            json.dumps(model).encode(),
        )

    def opening(self, usage: Usage | None) -> list[bytes]:
        """SSE events sent before the first token's: chat's role chunk (with zero-token usage when
        usage is continuous); nothing for completions."""
        if not self.chat:
            return []
        tail = b"," + usage.json() if usage is not None else b""
        return [
            b"data: "
            + self.prefix
            + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]' + tail + b"}\n\n"
        ]

    def tokens(self, text: bytes, *, last: bool, usage: Usage | None) -> bytes:
        """The SSE event carrying ``text`` (JSON-safe) and, when ``last``, finish reason length."""
        reason = b'"length"' if last else b"null"
        if self.chat:
            stop = b',"stop_reason":null' if last else b""  # vLLM sets it on the last chunk only
            choice = b'"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s%s}]' % (
                text,
                reason,
                stop,
            )
        else:
            choice = b'"text":"%s","logprobs":null,"finish_reason":%s,"stop_reason":null}]' % (
                text,
                reason,
            )
        tail = b"," + usage.json() if usage is not None else b""
        return b"data: " + self.prefix + b'"choices":[{"index":0,' + choice + tail + b"}\n\n"

    def usage_event(self, usage: Usage) -> bytes:
        """stream_options.include_usage: the final event, empty choices and the usage."""
        return b"data: " + self.prefix + b'"choices":[],' + usage.json() + b"}\n\n"

    def whole(self, text: bytes, usage: Usage) -> bytes:
        """The JSON body of a non-streamed answer."""
        if self.chat:
            prefix = self.prefix.replace(b'"chat.completion.chunk"', b'"chat.completion"', 1)
            choice = b'"message":{"role":"assistant","content":"%s"}' % text
        else:
            prefix = self.prefix
            choice = b'"text":"%s"' % text
        return (
            prefix
            + b'"choices":[{"index":0,'
            + choice
            + b',"logprobs":null,"finish_reason":"length","stop_reason":null}],'
            + usage.json()
            + b"}"
        )


DONE_EVENT = b"data: [DONE]\n\n"
