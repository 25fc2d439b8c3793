"""How budgettune launches the embedded engine (:class:`SimEngine`): as a subprocess of
``python -m budgettune.engines.embedded``, exactly as a real engine is launched, told its
parent's pid so that it stops when budgettune is gone."""

from __future__ import annotations

import contextlib
import os
import sys

from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback
from budgettune.engines.process import launch_process

# Set by the launcher to its own pid; the server stops when its parent is no longer that pid.
PARENT_PID_VAR = "BUDGETTUNE_PARENT_PID"


class SimEngine:
    """Launches the sim server as a subprocess, exactly as a real engine is launched."""

    name = "sim"
    health_path = "/health"

    def command(self, spec: LaunchSpec, port: int) -> list[str]:
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
        return cmd + list(spec.extra_args)

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        return {"PYTHONUNBUFFERED": "1", PARENT_PID_VAR: str(os.getpid()), **spec.env}

    def launch(
        self, spec: LaunchSpec, on_progress: ProgressCallback | None = None
    ) -> contextlib.AbstractAsyncContextManager[EngineHandle]:
        return launch_process(self, spec, on_progress)
