"""The embedded engine's OpenAI-compatible HTTP face (:class:`SimApp`): routes, request
validation and vLLM-shaped error answers; the core (:mod:`budgettune.engines.embedded.core`)
does the serving. Text prompts count ceil(UTF-8 bytes / 4) tokens."""

from __future__ import annotations

import asyncio
import json
import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from budgettune import __version__
from budgettune.engines.embedded.core import LiveRequest, SimCore
from budgettune.engines.embedded.http11 import Request, start_chunked, write_body, write_json

BYTES_PER_TEXT_TOKEN = 4  # the usual ~4 characters per token of English BPE text
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


@dataclass(slots=True, frozen=True)
class Completion:
    """A validated /v1/completions request: what the core needs to serve it."""

    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool  # stream_options.include_usage: a final usage chunk
    continuous_usage: bool  # stream_options.continuous_usage_stats: usage in every chunk


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


def prompt_token_count(prompt: Any) -> int:
    """Tokens of a prompt: a list of ids counts its length; text counts ceil(UTF-8 bytes / 4).
    A one-element batch is unwrapped; real batches are refused."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError("Prompt cannot be empty")
        return max(1, math.ceil(len(prompt.encode("utf-8")) / BYTES_PER_TEXT_TOKEN))
    if isinstance(prompt, list):
        if not prompt:
            raise ApiError("Prompt cannot be empty")
        if all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
            return len(prompt)
        if all(isinstance(p, (list, str)) for p in prompt):
            raise ApiError("batched prompts are not supported by the simulated engine")
        raise ApiError("prompt must be a string or a list of non-negative token ids")
    if prompt is None:
        raise ApiError("'prompt' is required")
    raise ApiError("prompt must be a string or a list of non-negative token ids")


class SimApp:
    """Routes and request validation; the core does the serving."""

    def __init__(self, core: SimCore, *, model_name: str, max_model_len: int) -> None:
        self.core = core
        self.model_name = model_name
        self.max_model_len = max_model_len

    async def handle(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        try:
            return await self._route(request, reader, writer)
        except ApiError as error:
            write_json(writer, error.status, error.document())
            return True
        except Exception:  # a bug must cost one request, never the server
            traceback.print_exc()
            internal = ApiError("internal error", 500, "InternalServerError")
            write_json(writer, 500, internal.document())
            return False

    async def _route(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        path, method = request.path, request.method
        gets: dict[str, Callable[[asyncio.StreamWriter], None]] = {
            "/health": lambda w: write_body(w, 200, b""),
            "/v1/models": self._models,
            "/version": lambda w: write_json(w, 200, {"version": __version__, "engine": "sim"}),
            "/metrics": lambda w: write_body(
                w, 200, self._metrics_text().encode(), content_type="text/plain; version=0.0.4"
            ),
        }
        if path == "/v1/completions":
            if method != "POST":
                raise ApiError(f"Method {method} not allowed", 405, "MethodNotAllowed")
            return await self._completions(request, reader, writer)
        if path in gets:
            if method not in ("GET", "HEAD"):
                raise ApiError(f"Method {method} not allowed", 405, "MethodNotAllowed")
            gets[path](writer)
            return True
        write_json(writer, 404, {"detail": "Not Found"})
        return True

    def _models(self, writer: asyncio.StreamWriter) -> None:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "budgettune",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        write_json(writer, 200, {"object": "list", "data": [card]})

    def _metrics_text(self) -> str:
        return (
            self.core.metrics.render()
            + "\n".join(self.core.lateness.render(f'model_name="{self.model_name}"'))
            + "\n"
        )

    def _parse(self, body_bytes: bytes) -> Completion:
        """Validate a completion request's JSON body; raises ApiError as vLLM would answer."""
        try:
            body = json.loads(body_bytes)
        except ValueError as exc:
            raise ApiError(f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise ApiError("The request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.model_name:
            raise ApiError(f"The model `{model}` does not exist.", 404, "NotFoundError")
        prompt_tokens = prompt_token_count(body.get("prompt"))
        max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise ApiError(f"max_tokens must be at least 1, got {max_tokens!r}.")
        if body.get("n", 1) != 1:
            raise ApiError("n > 1 is not supported by the simulated engine")
        stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        if options is not None and not stream:
            raise ApiError("Stream options can only be defined when `stream=True`.")
        options = options if isinstance(options, dict) else {}
        total = prompt_tokens + max_tokens
        if total > self.max_model_len:
            raise ApiError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {total} tokens ({prompt_tokens} in the messages, {max_tokens} in "
                "the completion). Please reduce the length of the messages or completion."
            )
        reason = self.core.scheduler.rejection(prompt_tokens, max_tokens)
        if reason is not None:
            raise ApiError(f"The request cannot fit the KV cache: {reason}")
        return Completion(
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            stream=stream,
            include_usage=bool(options.get("include_usage", False)),
            continuous_usage=bool(options.get("continuous_usage_stats", False)),
        )

    async def _completions(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        ask = self._parse(request.body)
        live = LiveRequest(
            rid=self.core.new_id(),
            writer=writer,
            reader=reader,
            prompt_tokens=ask.prompt_tokens,
            max_tokens=ask.max_tokens,
            stream=ask.stream,
            include_usage=ask.include_usage,
            continuous_usage=ask.continuous_usage,
            arrival_s=time.monotonic(),
        )
        if ask.stream:
            start_chunked(writer)
        self.core.submit(live)
        await live.done
        return not writer.is_closing()
