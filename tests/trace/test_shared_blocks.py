"""A Mooncake trace's shared blocks replayed exactly: the tree its hash_ids record (requests
that share a first block and part after it), not one prefix per group. The expected share, the
simulator's cache and the built-in engine's counters (keys from the content it received) all
give the tree's hits, where one prefix per group would claim more."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.loadgen.runner import RunOptions, Target, prompt_ids, run_schedule
from budgettune.loadgen.server_metrics import server_side
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.load import load_trace
from budgettune.trace.prefix_blocks import unbounded_hit_share
from budgettune.trace.replay import ReplayOptions, schedule_from_trace
from budgettune.trace.schema import SharedBlocks

# Four requests of three 512-token blocks, 2 s apart: B shares A's first two blocks, C only the
# first, D shares C's first two. A prefix cache hits B 1024, C 512, D 1024 tokens: 2,560.
ROWS = [[1, 2, 3], [1, 2, 4], [1, 5, 6], [1, 5, 7]]
TREE_HITS = 1024 + 512 + 1024
GROUP_HITS = 3 * 1024  # one prefix per group: C would share A's second block too


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "tree.jsonl"
    lines = [
        json.dumps(
            {"timestamp": 2000 * i, "input_length": 1536, "output_length": 2, "hash_ids": ids}
        )
        for i, ids in enumerate(ROWS)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_tree_is_kept_and_its_hits_counted(tmp_path: Path) -> None:
    trace, _ = load_trace(_trace(tmp_path))
    assert trace.shared_blocks is not None
    # Nodes: A's and B's first two blocks are one path, C's and D's part after the first.
    a, b, c, d = (trace.shared_blocks.of(i).tolist() for i in range(4))
    assert a == b and c == d and a[0] == c[0] and a[1] != c[1] and len(a) == 2
    total = 4 * 1536
    share = unbounded_hit_share(trace.prompt_tokens, None, None, shared=trace.shared_blocks)
    assert share == pytest.approx(TREE_HITS / total)
    groups = unbounded_hit_share(trace.prompt_tokens, trace.prefix_group, trace.prefix_tokens)
    assert groups == pytest.approx(GROUP_HITS / total)  # what the groups alone would claim
    schedule = schedule_from_trace(trace, ReplayOptions())
    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    config = SchedulerConfig(budget_tokens=2048, kv_capacity_blocks=10_000, prefix_caching=True)
    result = simulate(schedule, model, config)
    assert result.prefix_cache is not None and result.prefix_cache.hits_tokens == TREE_HITS
    # The load generator's content holds the tree: equal nodes, equal tokens; else none equal.
    options = RunOptions(content_salt=3)
    ids = [prompt_ids(schedule, i, options) for i in range(4)]
    assert ids[0][:1024] == ids[1][:1024] and ids[0][1024:] != ids[1][1024:]
    assert ids[0][:512] == ids[2][:512] and ids[0][512:1024] != ids[2][512:1024]

    async def replay() -> PrefixCacheCount | None:
        async with SimEngine().launch(LaunchSpec(budget_tokens=2048, prefix_caching=True)) as h:
            outcome = await run_schedule(schedule, Target(h.url, h.model), RunOptions())
        return PrefixCacheCount.from_counters(
            server_side(outcome.server_before, outcome.server_after).counters
        )

    assert asyncio.run(replay()) == PrefixCacheCount(total, TREE_HITS)


def test_shared_blocks_take_keeps_each_rows_blocks() -> None:
    blocks = SharedBlocks.from_lists([[1, 2], [], [3], [4, 5, 6]], 512)
    taken = blocks.take(np.array([3, 0, 2]))
    assert [taken.of(i).tolist() for i in range(3)] == [[4, 5, 6], [1, 2], [3]]
    masked = blocks.take(np.array([False, True, True, False]))
    assert [masked.of(i).tolist() for i in range(2)] == [[], [3]]
    assert blocks.shared_tokens(np.array([600, 100, 100, 2000])).tolist() == [600, 0, 100, 1536]
