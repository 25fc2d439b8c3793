"""The embedded engine's OpenAI-compatible HTTP face (:class:`SimApp`): routes, the API key,
request validation (:mod:`.validate`) and vLLM-shaped error answers; the core
(:mod:`budgettune.engines.embedded.core`) does the serving.

With an API key, every /v1 path needs ``Authorization: Bearer KEY`` and is otherwise answered
401 ``{"error": "Unauthorized"}``, vLLM's own body and rule (``AuthenticationMiddleware`` in
vllm/entrypoints/openai/server_utils.py: /v1 guarded, OPTIONS and /health, /metrics, /version
open)."""

from __future__ import annotations

import hashlib
import hmac
import time
import traceback
from collections.abc import Callable

from budgettune import __version__
from budgettune.engines.embedded.core import LiveRequest, SimCore
from budgettune.engines.embedded.http11 import Exchange
from budgettune.engines.embedded.validate import ApiError, parse_request
from budgettune.engines.embedded.wire import Endpoint
from budgettune.engines.prometheus import label_value

GUARDED_PREFIX = "/v1"  # vLLM's: what --api-key protects
UNAUTHORIZED_BODY = b'{"error":"Unauthorized"}'  # vLLM's 401 body, verbatim


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


class SimApp:
    """Routes, the API key and request validation; the core does the serving. ``api_key`` None
    leaves every path open."""

    def __init__(
        self,
        core: SimCore,
        *,
        model_name: str,
        max_model_len: int,
        api_key: str | None = None,
    ) -> None:
        self.core = core
        self.model_name = model_name
        self.max_model_len = max_model_len
        # Compared as SHA-256 digests in constant time, as vLLM does.
        self._key_digest = _digest(api_key) if api_key else None

    async def handle(self, exchange: Exchange) -> bool:
        try:
            return await self._route(exchange)
        except ApiError as error:
            exchange.respond_json(error.status, error.document())
            return True
        except Exception:  # a bug must cost one request, never the server
            traceback.print_exc()
            if not exchange.answered:
                internal = ApiError("internal error", 500, "InternalServerError")
                exchange.respond_json(500, internal.document(), close=True)
            return False

    def authorized(self, method: str, path: str, authorization: str | None) -> bool:
        """vLLM's rule: with a key, a /v1 path needs ``Bearer KEY`` (scheme in any case);
        OPTIONS and every other path are open."""
        if self._key_digest is None or method == "OPTIONS":
            return True
        if not path.startswith(GUARDED_PREFIX):
            return True
        scheme, _, token = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(_digest(token), self._key_digest)

    async def _route(self, exchange: Exchange) -> bool:
        request = exchange.request
        path, method = request.path, request.method
        if not self.authorized(method, path, request.headers.get("authorization")):
            exchange.respond(401, UNAUTHORIZED_BODY)
            return True
        gets: dict[str, Callable[[Exchange], None]] = {
            "/health": lambda e: e.respond(200, b""),
            "/v1/models": self._models,
            "/version": lambda e: e.respond_json(200, {"version": __version__, "engine": "sim"}),
            "/server_info": self._server_info,
            "/metrics": lambda e: e.respond(
                200, self._metrics_text().encode(), content_type="text/plain; version=0.0.4"
            ),
        }
        endpoints = {endpoint.value: endpoint for endpoint in Endpoint}
        if path in endpoints:
            if method != "POST":
                raise ApiError(f"Method {method} not allowed", 405, "MethodNotAllowed")
            return await self._generate(exchange, endpoints[path])
        if path in gets:
            if method not in ("GET", "HEAD"):
                raise ApiError(f"Method {method} not allowed", 405, "MethodNotAllowed")
            gets[path](exchange)
            return True
        exchange.respond_json(404, {"detail": "Not Found"})
        return True

    def _models(self, exchange: Exchange) -> None:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "budgettune",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.max_model_len,
        }
        exchange.respond_json(200, {"object": "list", "data": [card]})

    def _server_info(self, exchange: Exchange) -> None:
        """The scheduler's settings in the shape of vLLM's ``/server_info?config_format=json``
        (vLLM 0.32 answers it with VLLM_SERVER_DEV_MODE=1, dumping its VllmConfig), so a client
        learns the budget it is measuring. No chunking: ``max_num_batched_tokens`` is null."""
        config = self.core.scheduler.config
        scheduler = {
            "max_num_batched_tokens": config.budget_tokens,
            "max_num_seqs": config.max_num_seqs,
            "enable_chunked_prefill": config.budget_tokens is not None,
        }
        model = {"max_model_len": self.max_model_len}
        exchange.respond_json(
            200, {"vllm_config": {"scheduler_config": scheduler, "model_config": model}}
        )

    def _metrics_text(self) -> str:
        return (
            self.core.metrics.render()
            + "\n".join(self.core.lateness.render(f'model_name="{label_value(self.model_name)}"'))
            + "\n"
        )

    async def _generate(self, exchange: Exchange, endpoint: Endpoint) -> bool:
        """Serve a /v1/completions or /v1/chat/completions request; True to keep the
        connection."""
        ask = parse_request(
            exchange.request.body,
            endpoint,
            model_name=self.model_name,
            max_model_len=self.max_model_len,
        )
        reason = self.core.scheduler.rejection(ask.prompt_tokens, ask.max_tokens)
        if reason is not None:
            raise ApiError(f"The request cannot fit the KV cache: {reason}")
        live = LiveRequest(
            rid=self.core.new_id(),
            exchange=exchange,
            endpoint=endpoint,
            prompt_tokens=ask.prompt_tokens,
            max_tokens=ask.max_tokens,
            stream=ask.stream,
            include_usage=ask.include_usage,
            continuous_usage=ask.continuous_usage,
            arrival_s=time.monotonic(),
            content=ask.content,
        )
        if ask.stream:
            exchange.start_stream()
        self.core.submit(live)
        await live.done
        return not exchange.client_gone
