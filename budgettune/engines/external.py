"""The external engine (``--url``): nothing is launched; the server the user runs is checked
(reachable, lists a model, answers a one-token completion) and measured as it is."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

import httpx

from budgettune.core.errors import EngineError, UserError
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback, StartProgress
from budgettune.engines.process import check_ready, served_model

CHECK_TIMEOUT_S = 30.0


def normalize_url(url: str) -> str:
    """``http://host:port`` without a trailing slash or /v1. Raises UserError (field url)."""
    text = url.strip().rstrip("/")
    text = text.removesuffix("/v1")
    if not text.startswith(("http://", "https://")):
        raise UserError(f"expected http://HOST:PORT, got {url!r}", field="url")
    return text


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
        async with httpx.AsyncClient(timeout=timeout) as client:
            try:
                model = await served_model(client, url)
                await check_ready(client, url, model)
                version = "unknown"
                response = await client.get(f"{url}/version")
                if response.status_code == 200:
                    version = str(response.json().get("version", "unknown"))
            except httpx.HTTPError as exc:
                raise EngineError(
                    f"cannot use {url}: {type(exc).__name__}: {exc}",
                    field="url",
                    hint="is the server running and OpenAI-compatible (GET /v1/models)?",
                ) from None
            except ValueError as exc:
                raise EngineError(
                    f"{url} answered with something not JSON: {exc}", field="url"
                ) from None
        if on_progress is not None:
            on_progress(StartProgress(self.name, "ready", time.monotonic() - started, url))
        yield EngineHandle(
            engine=self.name,
            url=url,
            model=model,
            version=version,
            budget_tokens=spec.budget_tokens,
            startup_s=time.monotonic() - started,
        )

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        return self._connect(spec, on_progress)
