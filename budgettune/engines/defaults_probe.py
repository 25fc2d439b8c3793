"""Ask the installed engine, in its own interpreter and environment, which token budget and
running-sequence limit it would pick on this machine when given neither: the "what you run
today" baseline then is the engine's answer, not a copy of its rule. When it cannot answer,
``budgettune.core.engine_defaults`` (one documented table) does, and says so.

vLLM answers through ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py), the function
``vllm serve`` itself calls, with the device it sees (its CPU build: CPU defaults). Importing it
takes 5-15 s here. SGLang resolves its chunk size only while building its full server arguments
for a model, so it is not asked: the table answers for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from budgettune.core.engine_defaults import DefaultBudget, default_budget
from budgettune.engines.served import run_in_interpreter

DEFAULTS_PROBE_TIMEOUT_S = 120.0

# Run in vLLM's interpreter: the API server's column of vLLM's own defaults for this device.
_VLLM_SNIPPET = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.usage.usage_lib import UsageContext
import vllm
budgets, seqs = EngineArgs.get_batch_defaults(int(sys.argv[1]))
server = UsageContext.OPENAI_API_SERVER
print(json.dumps({"budget_tokens": budgets.get(server), "max_num_seqs": seqs.get(server),
                  "version": vllm.__version__}))
"""


def ask_vllm_defaults(
    command: Sequence[str], env: Mapping[str, str] | None = None, *, tensor_parallel: int = 1
) -> DefaultBudget | None:
    """vLLM's own defaults from the interpreter ``command`` runs under, with ``env`` added as
    the engine will run; None when it cannot say (no Python interpreter found, an import
    error, a timeout, or an answer that is not two positive integers)."""
    done = run_in_interpreter(
        command, _VLLM_SNIPPET, [str(max(1, tensor_parallel))], env, DEFAULTS_PROBE_TIMEOUT_S
    )
    if done is None:
        return None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return None
    try:
        answer = json.loads(lines[-1])
    except ValueError:
        return None
    if not isinstance(answer, dict):
        return None
    budget, seqs, version = (
        answer.get("budget_tokens"),
        answer.get("max_num_seqs"),
        answer.get("version"),
    )
    if not (isinstance(budget, int) and budget > 0 and isinstance(seqs, int) and seqs > 0):
        return None
    rule = f"asked vLLM {version} (EngineArgs.get_batch_defaults): {budget} tokens / {seqs} seqs"
    return DefaultBudget(budget, rule, max_num_seqs=seqs)


def engine_defaults(
    engine: str,
    command: Sequence[str] | None,
    env: Mapping[str, str] | None,
    *,
    gpu_name: str | None,
    memory_bytes: float | None,
    tensor_parallel: int = 1,
) -> DefaultBudget:
    """The engine's defaults: vLLM's own answer when ``command`` (the engine command) can be
    asked, else the table's for the GPU named (None: no GPU), its rule saying which."""
    if engine == "vllm" and command:
        asked = ask_vllm_defaults(command, env, tensor_parallel=tensor_parallel)
        if asked is not None:
            return asked
    table = default_budget(engine, gpu_name, memory_bytes, tensor_parallel=tensor_parallel)
    if engine == "vllm" and command:
        return DefaultBudget(
            table.budget_tokens,
            f"vLLM could not be asked; {table.rule}",
            max_num_seqs=table.max_num_seqs,
        )
    return table
