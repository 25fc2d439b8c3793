"""The SGLang engine: ``python -m sglang.launch_server --model-path MODEL ...
--chunked-prefill-size C`` (-1 without chunking) launched for one budget, its radix
(prefix) cache as asked and its metrics endpoint on. Proven on SGLang 0.5.23's CPU path by
the `sglang` tests (scripts/install-sglang-cpu.sh); command and lifecycle edge cases against a
stand-in server.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from collections.abc import AsyncIterator, Sequence

import httpx

from budgettune.core.errors import UserError
from budgettune.engines.base import (
    ConfigFileKeys,
    EngineHandle,
    LaunchSpec,
    PrefixCachingDefault,
    ProgressCallback,
)
from budgettune.engines.served import (
    check_passthrough,
    installed_version,
    launch_served,
)

MODULE = "sglang.launch_server"
PREFIX_CACHING = PrefixCachingDefault(
    on=True, source="SGLang keeps its radix cache unless --disable-radix-cache"
)
DISTRIBUTIONS = ("sglang",)
# SGLang bounds the prompt tokens of one prefill batch by the larger of --max-prefill-tokens
# (default 16384) and the model's context length (its --max-prefill-tokens help, 0.5.23). A
# budget above both (a short-context model, several prompts in one batch) would be cut silently,
# so above 16384 the flag is raised along with the budget; below, it never binds.
MAX_PREFILL_TOKENS_DEFAULT = 16384

# With SGLang's aliases (sglang/srt/server_args.py in 0.5.3, arg_groups/fields/ in 0.5.23):
# --model for --model-path, --tensor-parallel-size and --tp-size for one setting. Underscore
# spellings, abbreviations (--tp) and --config are refused by check_passthrough.
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
    "--tensor-parallel-size": "--tensor-parallel-size",
    "--tp": "--tensor-parallel-size",
    "--mem-fraction-static": "--gpu-memory-utilization",
    "--dtype": "--dtype",
}


# `python -m sglang.launch_server --config FILE` (sglang/srt/utils/server_args_config_parser.py,
# 0.5.23): a .yaml or .yml file whose keys become flags ahead of the command line's, so the
# command line wins; "key: true" sets a switch and "false" drops it.
CONFIG_KEYS = ConfigFileKeys(
    engine="SGLang",
    budget="chunked-prefill-size",
    max_num_seqs="max-running-requests",
    model=("model-path", "model"),
    max_model_len=("context-length",),
    tensor_parallel_size=("tp-size", "tensor-parallel-size", "tp"),
    gpu_memory_utilization=("mem-fraction-static",),
    dtype=("dtype",),
    prefix_on=None,
    prefix_off="disable-radix-cache",
    managed={
        "host": "nothing (budgettune serves on 127.0.0.1)",
        "port": "nothing (budgettune picks a free port)",
        "config": "one file",
        "enable-metrics": "nothing (budgettune turns SGLang's metrics on)",
    },
    suffixes=(".yaml", ".yml"),
)


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
    if spec.engine_config is not None:  # the user's own settings: the flags above win over it
        cmd += ["--config", str(spec.engine_config)]
    return cmd + list(spec.extra_args)


# SGLang runs on a CPU only with this variable set (sglang/srt/utils/common.py is_cpu() and
# srt/platforms/__init__.py, 0.5.23): with --device cpu alone, startup reaches model building and
# fails importing vllm._custom_ops. So --device cpu brings it, unless the user set it.
CPU_ENGINE_VAR = "SGLANG_USE_CPU_ENGINE"


def asks_for_cpu(args: Sequence[str]) -> bool:
    """Whether the pass-through arguments say ``--device cpu`` (or ``--device=cpu``)."""
    pairs = itertools.pairwise([*args, ""])
    return any(arg == "--device=cpu" or (arg, after) == ("--device", "cpu") for arg, after in pairs)


# SGLang reports its version in its server info (it has no /version): /server_info since 0.5.x
# deprecated /get_server_info (sglang/srt/entrypoints/http_server.py, 0.5.23), which older
# releases (0.5.3) alone serve.
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


async def server_info_version(url: str) -> str | None:
    """The version SGLang reports in its server info, or None when it does not say."""
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
            for path in SERVER_INFO_PATHS:
                response = await client.get(f"{url}{path}")
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
    metrics_path = "/metrics"

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        return sglang_command(spec, port)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        env = dict(spec.env)
        if asks_for_cpu(spec.extra_args):
            env.setdefault(CPU_ENGINE_VAR, "1")
        return env

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
