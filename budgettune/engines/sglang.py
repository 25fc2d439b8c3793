"""The SGLang engine: ``python -m sglang.launch_server --model-path MODEL ...
--chunked-prefill-size C`` (-1 without chunking) launched for one budget, with the radix
(prefix) cache off by default and its metrics endpoint on. SGLang is not installed in CI: the
command and lifecycle are tested against a stand-in server.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator

import httpx

from budgettune.core.errors import UserError
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback
from budgettune.engines.served import (
    check_passthrough,
    installed_version,
    launch_served,
)

MODULE = "sglang.launch_server"
DISTRIBUTIONS = ("sglang",)
# SGLang also caps one prefill batch by --max-prefill-tokens (default 16384); a budget above
# it would be cut silently, so it is raised along with the budget.
MAX_PREFILL_TOKENS_DEFAULT = 16384

MANAGED_FLAGS = {
    "--host": "always the spec's host",
    "--port": "--port",
    "--model-path": "--model",
    "--model": "--model",
    "--chunked-prefill-size": "--budget",
    "--max-running-requests": "--max-num-seqs",
    "--context-length": "--max-model-len",
    "--disable-radix-cache": "--prefix-caching",
    "--tp-size": "--tensor-parallel-size",
    "--tp": "--tensor-parallel-size",
    "--mem-fraction-static": "--gpu-memory-utilization",
    "--dtype": "--dtype",
}


def default_command() -> list[str]:
    """``python -m sglang.launch_server`` with the ``python`` on PATH (SGLang's environment)."""
    python = shutil.which("python") or shutil.which("python3") or "python"
    return [python, "-m", MODULE]


def sglang_command(spec: LaunchSpec, port: int) -> list[str]:
    """The argument list for ``spec`` on ``port``. Raises UserError without a model or when
    the pass-through arguments (``spec.extra_args``) repeat a flag budgettune sets."""
    if not spec.model:
        raise UserError(
            "the SGLang engine needs a model (a Hugging Face id or a folder)", field="model"
        )
    check_passthrough(spec.extra_args, MANAGED_FLAGS, "sglang")
    base = list(spec.engine_cmd) if spec.engine_cmd else default_command()
    cmd = [*base, "--model-path", spec.model, "--host", spec.host, "--port", str(port)]
    if not spec.chunked_prefill:
        cmd += ["--chunked-prefill-size", "-1"]
    elif spec.budget_tokens is not None:
        cmd += ["--chunked-prefill-size", str(spec.budget_tokens)]
        if spec.budget_tokens > MAX_PREFILL_TOKENS_DEFAULT:
            cmd += ["--max-prefill-tokens", str(spec.budget_tokens)]
    if spec.max_num_seqs is not None:
        cmd += ["--max-running-requests", str(spec.max_num_seqs)]
    if spec.max_model_len is not None:
        cmd += ["--context-length", str(spec.max_model_len)]
    if spec.tensor_parallel_size is not None:
        cmd += ["--tp-size", str(spec.tensor_parallel_size)]
    if spec.gpu_memory_utilization is not None:
        cmd += ["--mem-fraction-static", f"{spec.gpu_memory_utilization:g}"]
    if spec.dtype is not None:
        cmd += ["--dtype", spec.dtype]
    if not spec.prefix_caching:
        cmd.append("--disable-radix-cache")
    # /metrics for the load generator's server-side self-check.
    cmd.append("--enable-metrics")
    return cmd + list(spec.extra_args)


async def server_info_version(url: str) -> str | None:
    """SGLang reports its version in GET /get_server_info (it has no /version)."""
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
            response = await client.get(f"{url}/get_server_info")
            if response.status_code == 200:
                value = response.json().get("version")
                return str(value) if value else None
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return None


class SglangEngine:
    """SGLang launched as a subprocess, one server per budget."""

    name = "sglang"
    health_path = "/health"

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        return sglang_command(spec, port)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return dict(spec.env)

    @contextlib.asynccontextmanager
    async def _launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None
    ) -> AsyncIterator[EngineHandle]:
        command = sglang_command(spec, 0)  # user errors before anything starts
        version = installed_version(command, DISTRIBUTIONS, "sglang", spec.env)
        async with launch_served(self, spec, on_progress, version=version) as handle:
            if version.version == "unknown":
                handle.version = await server_info_version(handle.url) or handle.version
            yield handle

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        """Start SGLang for ``spec`` (see :class:`budgettune.engines.base.Engine`).

        Raises UserError for a missing model or a managed pass-through flag, EngineError
        when SGLang is missing, rejects a flag (named), exits during start, or is not healthy
        within ``spec.health_timeout_s`` (the CLI gives real engines 20 minutes), with its log tail.
        """
        return self._launch(spec, on_progress)
