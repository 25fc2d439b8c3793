"""The TensorRT-LLM engine: ``trtllm-serve MODEL --max_num_tokens C --enable_chunked_prefill``
launched for one budget, with the settings trtllm-serve has no flag for (prefix caching off,
its Prometheus endpoint on, the dtype) in an extra-options YAML file beside the engine log.

TensorRT-LLM needs an NVIDIA GPU: on this project's machines the command, the options file and
the failure messages are tested against a stand-in server, never a real trtllm-serve.

Names read in TensorRT-LLM's own source (main branch as stored, 2026; ``tensorrt_llm/commands/
serve.py``, ``serve/openai_server.py``, ``metrics/collector.py``):
- click options with underscores: ``--max_num_tokens`` ("Maximum number of batched input tokens
  after padding is removed in each batch"), ``--enable_chunked_prefill`` (a flag, off by
  default), ``--max_batch_size``, ``--max_seq_len``, ``--tp_size``/``--tensor_parallel_size``,
  ``--kv_cache_free_gpu_memory_fraction``/``--free_gpu_memory_fraction``, ``--config``/
  ``--extra_llm_api_options`` (a YAML file of LLM-API arguments that overrides the flags);
- routes: ``/health``, ``/version`` ({"version": ...}), ``/v1/models``, ``/v1/completions``;
  ``/metrics`` is JSON iteration statistics, and the Prometheus text is at
  ``/prometheus/metrics`` only with ``return_perf_metrics: true`` in the options file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

from budgettune.core.errors import UserError
from budgettune.engines.base import (
    EngineHandle,
    LaunchSpec,
    PrefixCachingDefault,
    ProgressCallback,
)
from budgettune.engines.served import check_passthrough, installed_version, launch_served

DEFAULT_COMMAND = ("trtllm-serve",)
PREFIX_CACHING = PrefixCachingDefault(
    on=True, source="TensorRT-LLM reuses KV blocks by default (KvCacheConfig.enable_block_reuse)"
)
DISTRIBUTIONS = ("tensorrt_llm", "tensorrt-llm")
MODULE = "tensorrt_llm"
METRICS_PATH = "/prometheus/metrics"

# check_passthrough compares flags with underscores read as dashes, so each is listed once.
MANAGED_FLAGS = {
    "--host": "always the spec's host",
    "--port": "--port",
    "--max-num-tokens": "--budget",
    "--enable-chunked-prefill": "--budget none",
    "--max-batch-size": "--max-num-seqs",
    "--max-seq-len": "--max-model-len",
    "--tp-size": "--tensor-parallel-size",
    "--tensor-parallel-size": "--tensor-parallel-size",
    "--kv-cache-free-gpu-memory-fraction": "--gpu-memory-utilization",
    "--free-gpu-memory-fraction": "--gpu-memory-utilization",
    "--extra-llm-api-options": "the options file budgettune writes",
}


def options_settings(spec: LaunchSpec) -> dict[str, object]:
    """The LLM-API arguments of the launch's options file: block reuse (TensorRT-LLM's prefix
    cache) as asked, the Prometheus endpoint on, the dtype when given."""
    kv: dict[str, object] = {"enable_block_reuse": spec.prefix_caching}
    if spec.gpu_memory_utilization is not None:
        # The file's kv_cache_config replaces the one the flags built: keep the fraction in it.
        kv["free_gpu_memory_fraction"] = spec.gpu_memory_utilization
    settings: dict[str, object] = {"kv_cache_config": kv, "return_perf_metrics": True}
    if spec.dtype is not None:
        settings["dtype"] = spec.dtype
    return settings


def options_yaml(settings: Mapping[str, object]) -> str:
    """YAML text for ``trtllm-serve --config``: one ``key: value`` line each, a mapping as an
    indented block (JSON scalars are YAML scalars)."""
    return "".join(_yaml_lines(settings, 0))


def _yaml_lines(settings: Mapping[str, object], indent: int) -> list[str]:
    pad = " " * indent
    lines = []
    for key, value in settings.items():
        if isinstance(value, Mapping):
            lines.append(f"{pad}{key}:\n")
            lines += _yaml_lines(value, indent + 2)
        elif isinstance(value, bool):
            lines.append(f"{pad}{key}: {'true' if value else 'false'}\n")
        elif isinstance(value, int | float):
            lines.append(f"{pad}{key}: {value!r}\n")
        else:
            lines.append(f"{pad}{key}: {json.dumps(str(value))}\n")
    return lines


def trtllm_command(spec: LaunchSpec, port: int, options_path: Path) -> list[str]:
    """The argument list for ``spec`` on ``port`` with the options file at ``options_path``.
    Raises UserError without a model or when the pass-through arguments repeat a flag budgettune
    sets (``--config`` included)."""
    if not spec.model:
        raise UserError(
            "the TensorRT-LLM engine needs a model (a Hugging Face id or a folder)", field="model"
        )
    check_passthrough(spec.extra_args, MANAGED_FLAGS, "trtllm", abbreviations=False)
    base = list(spec.engine_cmd or DEFAULT_COMMAND)
    cmd = [*base, spec.model, "--host", spec.host, "--port", str(port)]
    if spec.budget_tokens is not None:
        cmd += ["--max_num_tokens", str(spec.budget_tokens)]
    if spec.chunked_prefill and spec.budget_tokens is not None:
        # trtllm-serve leaves chunking off unless told; the engine's default (budget None) is
        # its default in this too, and --budget none leaves it off.
        cmd.append("--enable_chunked_prefill")
    if spec.max_num_seqs is not None:
        cmd += ["--max_batch_size", str(spec.max_num_seqs)]
    if spec.max_model_len is not None:
        cmd += ["--max_seq_len", str(spec.max_model_len)]
    if spec.tensor_parallel_size is not None:
        cmd += ["--tp_size", str(spec.tensor_parallel_size)]
    if spec.gpu_memory_utilization is not None:
        cmd += ["--kv_cache_free_gpu_memory_fraction", f"{spec.gpu_memory_utilization:g}"]
    cmd += ["--config", str(options_path)]
    return cmd + list(spec.extra_args)


def options_path_for(spec: LaunchSpec) -> Path:
    """Where a launch's options file goes: beside its log (``engine-256.log`` ->
    ``engine-256.trtllm.yaml``), else a new temporary file (created empty)."""
    if spec.log_path is not None:
        return spec.log_path.with_name(spec.log_path.stem + ".trtllm.yaml")
    handle, name = tempfile.mkstemp(prefix="budgettune-trtllm-", suffix=".yaml")
    os.close(handle)
    return Path(name)


class _Launch:
    """One launch: the command with its options file (what launch_process runs)."""

    name = "trtllm"
    health_path = "/health"
    metrics_path = METRICS_PATH

    def __init__(self, options_path: Path) -> None:
        self.options_path = options_path

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        return trtllm_command(spec, port, self.options_path)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return dict(spec.env)


class TrtllmEngine:
    """TensorRT-LLM's ``trtllm-serve`` launched as a subprocess, one server per budget."""

    name = "trtllm"

    @contextlib.asynccontextmanager
    async def _launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None
    ) -> AsyncIterator[EngineHandle]:
        command = trtllm_command(spec, 0, Path("options.yaml"))  # user errors first
        version = installed_version(command, DISTRIBUTIONS, MODULE, spec.env)
        path = options_path_for(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "# Written by budgettune for this launch: the settings trtllm-serve has no flag for.\n"
            + options_yaml(options_settings(spec))
        )
        async with launch_served(_Launch(path), spec, on_progress, version=version) as handle:
            yield handle

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        """Start trtllm-serve for ``spec`` (see :class:`budgettune.engines.base.Engine`).

        Raises UserError for a missing model or a managed pass-through flag, EngineError when
        TensorRT-LLM is missing, rejects a flag (named), exits during start, or is not healthy
        within ``spec.health_timeout_s``, with its log tail.
        """
        return self._launch(spec, on_progress)
