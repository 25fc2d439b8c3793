"""Request bodies of the embedded engine checked into a :class:`Completion`, refused as vLLM
refuses them (:class:`ApiError`). Prompt length in tokens, for both endpoints: a list of token
ids counts its length; text counts ceil(UTF-8 bytes / 4), at least 1. A chat request's text is
its messages' contents concatenated (string contents, or the ``text`` of text parts): roles and
the chat template add nothing, so a client that sends N tokens' worth of text is served N."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from budgettune.core.errors import shorten
from budgettune.engines.embedded.wire import Endpoint

BYTES_PER_TEXT_TOKEN = 4  # the usual ~4 characters per token of English BPE text
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat's is the context left


@dataclass(slots=True, frozen=True)
class Completion:
    """A validated request: what the core needs to serve it. Every request runs to
    ``max_tokens`` (the sim has no end-of-sequence token, as with ``ignore_eos``)."""

    endpoint: Endpoint
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool  # stream_options.include_usage: a final usage chunk
    continuous_usage: bool  # stream_options.continuous_usage_stats: usage in every chunk
    content: tuple[int, ...] | bytes = b""  # the prompt: its ids, or its text's UTF-8 bytes


class ApiError(Exception):
    """A request we refuse, answered as vLLM does: JSON {object: error, message, type, code}."""

    def __init__(self, message: str, status: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind

    def document(self) -> dict[str, Any]:
        """The JSON error body (the HTTP boundary)."""
        return {
            "object": "error",
            "message": str(self),
            "type": self.kind,
            "param": None,
            "code": self.status,
        }


def text_token_count(text: str) -> int:
    """ceil(UTF-8 bytes / 4), at least 1."""
    return max(1, math.ceil(len(text.encode("utf-8")) / BYTES_PER_TEXT_TOKEN))


def prompt_content(prompt: Any) -> tuple[int, ...] | bytes:
    """A /v1/completions prompt as the engine keeps it: a list of ids as a tuple, text as its
    UTF-8 bytes (tokens: :func:`content_tokens`). A one-element batch is unwrapped; real
    batches are refused."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError("Prompt cannot be empty")
        return prompt.encode("utf-8")
    if isinstance(prompt, list):
        if not prompt:
            raise ApiError("Prompt cannot be empty")
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return tuple(prompt)
        if all(isinstance(p, (list, str)) for p in prompt):
            raise ApiError("batched prompts are not supported by the simulated engine")
        raise ApiError("prompt must be a string or a list of non-negative token ids")
    if prompt is None:
        raise ApiError("'prompt' is required")
    raise ApiError("prompt must be a string or a list of non-negative token ids")


def chat_prompt_content(messages: Any) -> bytes:
    """A chat request's messages as the engine keeps them: their text contents concatenated,
    as UTF-8 bytes. Refuses what is not a list of messages with text content."""
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list of messages")
    texts: list[str] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError("each message must be an object with a 'role'")
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise ApiError("only text content parts are supported by the simulated engine")
                texts.append(str(part.get("text", "")))
        elif content is not None:
            raise ApiError("message content must be a string or a list of text parts")
    return "".join(texts).encode("utf-8")


def content_tokens(content: tuple[int, ...] | bytes) -> int:
    """Tokens of a prompt's content: its ids, or ceil(UTF-8 bytes / 4), at least 1."""
    if isinstance(content, bytes):
        return max(1, math.ceil(len(content) / BYTES_PER_TEXT_TOKEN))
    return len(content)


def prompt_token_count(prompt: Any) -> int:
    """Tokens of a /v1/completions prompt (:func:`prompt_content`, :func:`content_tokens`)."""
    return content_tokens(prompt_content(prompt))


def chat_prompt_tokens(messages: Any) -> int:
    """Tokens of a chat request's messages (:func:`chat_prompt_content`, :func:`content_tokens`)."""
    return content_tokens(chat_prompt_content(messages))


def _whole_number(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ApiError(f"{name} must be an integer, got {shorten(repr(value))}.")
    return value


def parse_request(
    body_bytes: bytes, endpoint: Endpoint, *, model_name: str, max_model_len: int
) -> Completion:
    """Validate a completion or chat request's JSON body; raises ApiError as vLLM would."""
    try:
        body = json.loads(body_bytes)
    except ValueError as exc:
        raise ApiError(f"Invalid JSON body: {shorten(exc)}") from None
    except RecursionError:  # [[[[...: the client's mistake, a 400 like any bad body
        raise ApiError("Invalid JSON body: nested too deep") from None
    if not isinstance(body, dict):
        raise ApiError("The request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != model_name:
        raise ApiError(f"The model `{shorten(model)}` does not exist.", 404, "NotFoundError")
    content: tuple[int, ...] | bytes
    if endpoint is Endpoint.CHAT:
        content = chat_prompt_content(body.get("messages"))
        prompt_tokens = content_tokens(content)
        # vLLM prefers max_completion_tokens; with neither, the context left is the limit.
        max_tokens = _whole_number(body, "max_completion_tokens")
        if max_tokens is None:
            max_tokens = _whole_number(body, "max_tokens")
        if max_tokens is None:
            max_tokens = max(1, max_model_len - prompt_tokens)  # past it: the context error
    else:
        content = prompt_content(body.get("prompt"))
        prompt_tokens = content_tokens(content)
        max_tokens = _whole_number(body, "max_tokens")
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
    if max_tokens < 1:
        raise ApiError(f"max_tokens must be at least 1, got {max_tokens!r}.")
    min_tokens = _whole_number(body, "min_tokens") or 0
    if min_tokens < 0:
        raise ApiError(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if min_tokens > max_tokens:
        raise ApiError(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )
    if body.get("n", 1) not in (1, None):
        raise ApiError("n > 1 is not supported by the simulated engine")
    stream = bool(body.get("stream", False))
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):  # vLLM's model refuses it too
        raise ApiError("stream_options: Input should be a valid dictionary")
    if options is not None and not stream:
        raise ApiError("Stream options can only be defined when `stream=True`.")
    options = options if isinstance(options, dict) else {}
    total = prompt_tokens + max_tokens
    if total > max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, "
            f"you requested {total} tokens ({prompt_tokens} in the messages, {max_tokens} in "
            "the completion). Please reduce the length of the messages or completion."
        )
    return Completion(
        endpoint=endpoint,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
        content=content,
    )
