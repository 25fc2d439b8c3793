"""Every run sends content no other run shares: a second replay of the same schedule on the same
engine (a re-measure) finds nothing of the first in the prefix cache, so its hit share is the
traffic's own; a given salt reproduces a run's prompts exactly."""

from __future__ import annotations

import asyncio

import numpy as np

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.loadgen.runner import RunOptions, RunOutcome, Target, prompt_ids, run_schedule
from budgettune.loadgen.server_metrics import server_side
from budgettune.trace.schedule import Schedule

# 8 requests, 0.2 s apart, two groups sharing their first 320 of 400 tokens.
SHARED = Schedule(
    target_s=np.arange(8) * 0.2,
    prompt_tokens=np.full(8, 400, dtype=np.int64),
    output_tokens=np.full(8, 4, dtype=np.int64),
    prefix_group=np.arange(8, dtype=np.int64) % 2,
    prefix_tokens=np.full(8, 320, dtype=np.int64),
)


def _cache(outcome: RunOutcome) -> PrefixCacheCount:
    found = PrefixCacheCount.from_counters(
        server_side(outcome.server_before, outcome.server_after).counters
    )
    assert found is not None
    return found


def test_a_second_run_on_the_same_engine_hits_only_its_own_prefixes() -> None:
    async def two_runs() -> tuple[RunOutcome, RunOutcome]:
        spec = LaunchSpec(budget_tokens=512, prefix_caching=True)
        async with SimEngine().launch(spec) as handle:
            target = Target(handle.url, handle.model)
            first = await run_schedule(SHARED, target, RunOptions())
            second = await run_schedule(SHARED, target, RunOptions())
            return first, second

    first, second = asyncio.run(two_runs())
    assert first.complete and second.complete
    assert first.content_salt != second.content_salt
    # The 6 requests after each group's first hit their 20 full blocks of 16 (320 tokens).
    expected = PrefixCacheCount(8 * 400, 6 * 320)
    assert _cache(first) == expected
    assert _cache(second) == expected  # with the first run's prompts, it would hit 8 x 384


def test_a_given_salt_reproduces_the_prompts() -> None:
    salted = RunOptions(content_salt=12345)
    again = [prompt_ids(SHARED, i, salted) for i in range(8)]
    assert again == [prompt_ids(SHARED, i, RunOptions(content_salt=12345)) for i in range(8)]
    other = [prompt_ids(SHARED, i, RunOptions(content_salt=54321)) for i in range(8)]
    assert all(a[:320] != b[:320] for a, b in zip(again, other, strict=True))
    assert again[0][:320] == again[2][:320] and again[0][320:] != again[2][320:]
