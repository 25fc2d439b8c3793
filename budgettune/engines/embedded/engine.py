"""How budgettune launches the embedded engine (:class:`SimEngine`): as a subprocess of
``python -m budgettune.engines.embedded``, exactly as a real engine is launched, told its
parent's pid so that it stops when budgettune is gone."""

from __future__ import annotations

import contextlib
import os
import sys

from budgettune.engines.base import (
    EngineHandle,
    LaunchSpec,
    PrefixCachingDefault,
    ProgressCallback,
)
from budgettune.engines.process import launch_process

PREFIX_CACHING = PrefixCachingDefault(
    on=True, source="the built-in engine follows vLLM V1, which caches prefixes by default"
)

# Set by the launcher to its own pid; the server stops when its parent is no longer that pid.
PARENT_PID_VAR = "BUDGETTUNE_PARENT_PID"
API_KEY_VAR = "VLLM_API_KEY"  # vLLM's variable for --api-key; the embedded engine reads it too


# Flags budgettune sets on the embedded engine at every launch; given again as --engine-arg they
# would run another budget under this one's name. The others it sets only when asked (below)
# are refused when it does. Its parser expands no abbreviation (allow_abbrev off: its own
# --mode is a prefix of --model), so only exact spellings are compared.
MANAGED_FLAGS = {
    "--host": "always the spec's host",
    "--port": "--port",
    "--max-num-batched-tokens": "--budget",
    "--enable-chunked-prefill": "--budget none",
    "--no-enable-chunked-prefill": "--budget none",
    "--enable-prefix-caching": "--prefix-caching",
    "--no-enable-prefix-caching": "--prefix-caching",
    "--config": "--engine-config",
}
WHEN_SET = {
    "--max-num-seqs": "--max-num-seqs",
    "--model": "--model",
    "--gpu": "--gpu",
    "--max-model-len": "--max-model-len",
    "--tensor-parallel-size": "--tensor-parallel-size",
}


class SimEngine:
    """Launches the sim server as a subprocess, exactly as a real engine is launched."""

    name = "sim"
    health_path = "/health"
    metrics_path = "/metrics"

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
        """The embedded engine's argument list. Raises UserError when the pass-through
        arguments repeat a flag budgettune sets."""
        from budgettune.engines.served import check_passthrough

        base = list(spec.engine_cmd or (sys.executable, "-m", "budgettune.engines.embedded"))
        cmd = [*base, "--host", spec.host, "--port", str(port)]
        if spec.budget_tokens is not None:
            cmd += ["--max-num-batched-tokens", str(spec.budget_tokens)]
        if not spec.chunked_prefill:
            cmd.append("--no-enable-chunked-prefill")
        if spec.max_num_seqs is not None:
            cmd += ["--max-num-seqs", str(spec.max_num_seqs)]
        if spec.model is not None:
            cmd += ["--model", spec.model]
        if spec.gpu is not None:
            cmd += ["--gpu", spec.gpu]
        if spec.max_model_len is not None:
            cmd += ["--max-model-len", str(spec.max_model_len)]
        if spec.tensor_parallel_size is not None:
            cmd += ["--tensor-parallel-size", str(spec.tensor_parallel_size)]
        # Always said, as for vLLM: the engine's own default never decides a measurement.
        cmd.append(
            "--enable-prefix-caching" if spec.prefix_caching else "--no-enable-prefix-caching"
        )
        if spec.engine_config is not None:  # the keys it models; the flags above win over them
            cmd += ["--config", str(spec.engine_config)]
        managed = {**MANAGED_FLAGS, **{f: o for f, o in WHEN_SET.items() if f in cmd}}
        check_passthrough(spec.extra_args, managed, "sim", abbreviations=False)
        return cmd + list(spec.extra_args)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        env = {"PYTHONUNBUFFERED": "1", PARENT_PID_VAR: str(os.getpid()), **spec.env}
        if spec.api_key:
            # The key goes by VLLM_API_KEY (read as vLLM reads it when --api-key is not given),
            # not as --api-key: the command line is recorded in results and shown by ps.
            env[API_KEY_VAR] = spec.api_key
        return env

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        return launch_process(self, spec, on_progress)
