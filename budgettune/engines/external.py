"""The external engine (``--url``): nothing is launched; the server the user runs is checked
(reachable, lists a model, answers a one-token completion) and measured as it is."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import httpx

from budgettune.core.auth import bearer_headers
from budgettune.core.errors import EngineError, UserError
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback, StartProgress
from budgettune.engines.process import check_ready, served_model

CHECK_TIMEOUT_S = 10.0  # each check: a server that accepts and never answers fails in this
SERVER_INFO_PATH = "/server_info?config_format=json"  # vLLM's, with VLLM_SERVER_DEV_MODE=1


def describe_http_error(error: httpx.HTTPError, what: str) -> str:
    """One line for a failed check: ``what`` (e.g. "GET /v1/models") and why, never a blank
    ``ReadTimeout:`` (httpx's timeouts carry no text)."""
    if isinstance(error, httpx.TimeoutException):
        return f"no answer to {what} within {CHECK_TIMEOUT_S:.0f} s (it accepts connections)"
    if isinstance(error, httpx.ConnectError):
        return f"cannot connect ({str(error) or 'refused'})"
    return f"{what} failed: {type(error).__name__}: {str(error) or 'no detail'}"


def budget_from_server_info(document: object) -> int | None:
    """The token budget in a vLLM ``/server_info?config_format=json`` document (its
    ``vllm_config.scheduler_config.max_num_batched_tokens``, as vLLM 0.32's
    entrypoints/serve/dev/server_info/api_router.py dumps VllmConfig), None when absent."""
    if not isinstance(document, dict):
        return None
    config = document.get("vllm_config")
    scheduler = config.get("scheduler_config") if isinstance(config, dict) else None
    if not isinstance(scheduler, dict):
        return None
    value = scheduler.get("max_num_batched_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


async def server_budget(client: httpx.AsyncClient, url: str) -> int | None:
    """The budget the server at ``url`` says it runs (vLLM with its dev endpoints on, the
    built-in engine), None when it does not say."""
    try:
        response = await client.get(f"{url}{SERVER_INFO_PATH}")
        if response.status_code != 200:
            return None
        return budget_from_server_info(response.json())
    except (httpx.HTTPError, ValueError):
        return None


def normalize_url(url: str) -> str:
    """``http://host:port`` without a trailing slash or /v1. Raises UserError (field url)."""
    text = url.strip().rstrip("/")
    text = text.removesuffix("/v1")
    if not text.startswith(("http://", "https://")):
        raise UserError(f"expected http://HOST:PORT, got {url!r}", field="url")
    return text


def ask_server_budget(url: str, api_key: str | None) -> int | None:
    """The budget the server at ``url`` says it runs (see :func:`server_budget`), asked before
    a sweep plans; None when it does not say. Raises EngineError (field ``url``) when the
    server cannot be reached or does not answer."""
    base = normalize_url(url)

    async def ask() -> int | None:
        timeout = httpx.Timeout(CHECK_TIMEOUT_S, connect=5.0)
        async with httpx.AsyncClient(timeout=timeout, headers=bearer_headers(api_key)) as client:
            try:
                await client.get(f"{base}/health")
            except httpx.HTTPError as exc:
                raise EngineError(
                    f"cannot use {base}: {describe_http_error(exc, 'GET /health')}",
                    field="url",
                    hint="is the server running and OpenAI-compatible (GET /v1/models)?",
                ) from None
            return await server_budget(client, base)

    return asyncio.run(ask())


class ExternalEngine:
    """A server the user runs (vLLM, SGLang, anything OpenAI-compatible)."""

    name = "external"

    @contextlib.asynccontextmanager
    async def _connect(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None
    ) -> AsyncIterator[EngineHandle]:
        if not spec.url:
            raise UserError("the external engine needs the server's URL", field="url")
        url = normalize_url(spec.url)
        started = time.monotonic()
        if on_progress is not None:
            on_progress(StartProgress(self.name, "connect", 0.0, url))
        timeout = httpx.Timeout(CHECK_TIMEOUT_S, connect=5.0)
        async with httpx.AsyncClient(
            timeout=timeout, headers=bearer_headers(spec.api_key)
        ) as client:
            step = "GET /v1/models"
            try:
                model = await served_model(client, url)
                step = "a one-token completion"
                await check_ready(client, url, model)
                step = "GET /version"
                version = "unknown"
                response = await client.get(f"{url}/version")
                if response.status_code == 200:
                    version = str(response.json().get("version", "unknown"))
                told = await server_budget(client, url)
            except httpx.HTTPError as exc:
                raise EngineError(
                    f"cannot use {url}: {describe_http_error(exc, step)}",
                    field="url",
                    hint="is the server running and OpenAI-compatible (GET /v1/models)?",
                ) from None
            except (ValueError, AttributeError, KeyError, TypeError) as exc:
                raise EngineError(
                    f"{url} answered {step} with something not OpenAI-shaped: {type(exc).__name__}",
                    field="url",
                ) from None
        if told is not None and spec.budget_tokens is not None and told != spec.budget_tokens:
            raise UserError(
                f"the server at {url} runs budget {told} (its /server_info), not "
                f"{spec.budget_tokens}",
                field="baseline",
                hint="leave the budget to the server (--baseline auto), or give the one it runs",
            )
        if on_progress is not None:
            on_progress(StartProgress(self.name, "ready", time.monotonic() - started, url))
        yield EngineHandle(
            engine=self.name,
            url=url,
            model=model,
            version=version,
            budget_tokens=spec.budget_tokens or told,
            startup_s=time.monotonic() - started,
        )

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        return self._connect(spec, on_progress)
