"""The simulator's prefix cache: vLLM V1's rules (lookup at first scheduling, blocks cached when
scheduled, at least one token computed, least recently freed evicted first), the pool's
accounting under random load with preemptions, and hit shares a hand count predicts."""

from __future__ import annotations

import numpy as np
import pytest

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.stepmodel import StepModel
from budgettune.sim.prefix_cache import CachingBlockPool
from budgettune.sim.scheduler import Scheduler, SchedulerConfig
from budgettune.sim.simulator import prefix_block_keys, simulate
from budgettune.trace.schedule import Schedule

MODEL = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))


def _keys(group: int, blocks: int) -> tuple[tuple[int, int], ...]:
    return tuple((group, j) for j in range(blocks))


def _run(sched: Scheduler) -> None:
    while sched.has_work:
        sched.commit(sched.schedule())


def test_pool_hands_out_never_used_blocks_then_least_recently_freed() -> None:
    pool = CachingBlockPool(4)
    pool.allocate(2)
    assert pool.register("a") and pool.register("b")
    assert not pool.register("a")  # a duplicate stays the request's own block
    pool.release_keys(["b", "a"])  # freed last first: b is evicted before a
    assert pool.used == 0 and pool.free == 4 and pool.cached_blocks == 2
    assert pool.match(["a", "b"], 10) == (2, 2)
    pool.allocate(2)  # the two never-used blocks: nothing evicted
    assert pool.match(["a", "b"], 10) == (2, 2)
    pool.allocate(1)  # the least recently freed: b
    assert pool.match(["a", "b"], 10) == (1, 1)
    pool.acquire(["a"])  # a hit takes a's block back from the free queue
    assert pool.used == 4 and pool.free == 0
    pool.release(3)
    pool.release_keys(["a"])
    assert pool.used == 0 and pool.match(["a"], 10) == (1, 1)


def test_second_request_of_a_group_skips_the_shared_blocks() -> None:
    config = SchedulerConfig(
        budget_tokens=512, kv_capacity_blocks=1000, block_size=16, prefix_caching=True
    )
    sched = Scheduler(config)
    sched.add("a", 300, 2, _keys(0, 12))  # 200 shared tokens: 12 full blocks
    _run(sched)
    sched.add("b", 300, 2, _keys(0, 12))
    plan = sched.schedule()
    assert plan.chunks == [("b", 300 - 192, 192)]  # its chunk starts after the hits
    assert plan.prefill_prefix_tokens == 192  # and attends to them
    sched.commit(plan)
    _run(sched)
    assert sched.prefix_cache_queries_tokens == 600
    assert sched.prefix_cache_hits_tokens == 192
    assert sched.pool.used == 0


def test_at_least_the_last_token_is_computed() -> None:
    config = SchedulerConfig(
        budget_tokens=512, kv_capacity_blocks=1000, block_size=16, prefix_caching=True
    )
    sched = Scheduler(config)
    sched.add("a", 64, 2, _keys(0, 4))
    _run(sched)
    sched.add("b", 64, 2, _keys(0, 4))  # the whole prompt is cached: its last block is not hit
    assert sched.schedule().chunks == [("b", 16, 48)]


def test_a_prefix_still_being_prefilled_is_hit_as_far_as_it_is_scheduled() -> None:
    # A takes 128 tokens an iteration (the long-prefill threshold), B is admitted beside A's
    # first chunk. vLLM cached A's first 128 tokens when it scheduled them, in the same step, so
    # B hits those 8 blocks and nothing A schedules later (B looked up once).
    config = SchedulerConfig(
        budget_tokens=256, kv_capacity_blocks=1000, block_size=16, prefix_caching=True,
        long_prefill_token_threshold=128,
    )  # fmt: skip
    sched = Scheduler(config)
    sched.add("a", 700, 2, _keys(0, 40))
    sched.add("b", 700, 2, _keys(0, 40))
    assert sched.schedule().chunks == [("a", 128, 0), ("b", 128, 128)]
    assert sched.prefix_cache_hits_tokens == 128


def test_sglang_hits_only_what_earlier_iterations_computed() -> None:
    # The same two requests on SGLang's rules: A's first chunk enters the radix tree after the
    # iteration that computes it, so B, scheduled beside it, hits nothing, and a request
    # scheduled in the next iteration hits what A has computed by then.
    config = SchedulerConfig(
        budget_tokens=256, kv_capacity_blocks=1000, block_size=16, prefix_caching=True,
        long_prefill_token_threshold=128, prefix_cached_after_iteration=True,
    )  # fmt: skip
    sched = Scheduler(config)
    sched.add("a", 700, 2, _keys(0, 40))
    sched.add("b", 700, 2, _keys(0, 40))
    sched.commit(sched.schedule())
    assert sched.prefix_cache_hits_tokens == 0
    sched.add("c", 700, 2, _keys(0, 40))
    plan = sched.schedule()  # A's second chunk, then B's (no room left for C this time)
    sched.commit(plan)
    while not any(rid == "c" for rid, _, _ in plan.chunks):
        plan = sched.schedule()
        sched.commit(plan)
    c_chunk = next(chunk for chunk in plan.chunks if chunk[0] == "c")
    assert c_chunk[2] == sched.prefix_cache_hits_tokens > 0  # C starts after A's cached blocks
    _run(sched)
    pool = sched.pool
    assert isinstance(pool, CachingBlockPool) and pool.used == 0
    assert pool.free_queue_blocks() == 1000


def test_without_caching_keys_change_nothing() -> None:
    config = SchedulerConfig(budget_tokens=256, kv_capacity_blocks=1000, block_size=16)
    sched = Scheduler(config)
    sched.add("a", 300, 2, _keys(0, 12))
    _run(sched)
    sched.add("b", 300, 2, _keys(0, 12))
    assert sched.schedule().chunks == [("b", 256, 0)]
    assert sched.prefix_cache_queries_tokens == sched.prefix_cache_hits_tokens == 0


@pytest.mark.parametrize("after_iteration", [False, True])
@pytest.mark.parametrize("capacity", [60, 400])
def test_pool_accounting_holds_under_random_load_and_preemption(
    capacity: int, after_iteration: bool
) -> None:
    rng = np.random.default_rng(capacity)
    config = SchedulerConfig(
        budget_tokens=128, kv_capacity_blocks=capacity, block_size=16, prefix_caching=True,
        prefix_cached_after_iteration=after_iteration,
    )  # fmt: skip
    sched = Scheduler(config)
    for i in range(300):
        group = int(rng.integers(0, 5))
        prompt = int(rng.integers(20, 400))
        sched.add(i, prompt, int(rng.integers(1, 60)), _keys(group, int(rng.integers(0, 20))))
        plan = sched.schedule()
        if rng.random() < 0.1:  # a client gone while its chunk runs: its blocks come back
            sched.abort(int(rng.integers(max(0, i - 5), i + 1)))
        sched.commit(plan)
        pool = sched.pool
        assert isinstance(pool, CachingBlockPool)
        held = sum(sched.kv_blocks_by_request().values())
        assert pool.used <= min(held, capacity)  # a shared block counts once in the pool
        assert pool.free_queue_blocks() == pool.free == capacity - pool.used
    _run(sched)
    assert sched.pool.used == 0
    assert isinstance(sched.pool, CachingBlockPool) and sched.pool.free_queue_blocks() == capacity
    if capacity == 60:
        assert sched.preemptions_total > 0
    assert 0 < sched.prefix_cache_hits_tokens < sched.prefix_cache_queries_tokens


def test_simulated_hit_share_is_the_hand_count() -> None:
    # Requests one at a time (each done before the next arrives), 3 groups of 500-token
    # prefixes: every request after its group's first hits 31 blocks (496 tokens).
    n, prefix, prompt = 30, 500, 900
    groups = np.arange(n) % 3
    schedule = Schedule(
        target_s=np.arange(n) * 10.0,
        prompt_tokens=np.full(n, prompt),
        output_tokens=np.full(n, 4),
        prefix_group=groups,
        prefix_tokens=np.full(n, prefix),
    )
    config = SchedulerConfig(
        budget_tokens=512, kv_capacity_blocks=10_000, block_size=16, prefix_caching=True
    )
    result = simulate(schedule, MODEL, config)
    assert result.prefix_cache == PrefixCacheCount(n * prompt, (n - 3) * 496)
    cold = simulate(schedule, MODEL, SchedulerConfig(budget_tokens=512, kv_capacity_blocks=10_000))
    assert cold.prefix_cache is None
    warm_ttft = [r.token_times_s[0] - r.target_s for r in result.records[3:]]
    cold_ttft = [r.token_times_s[0] - r.target_s for r in cold.records[3:]]
    assert max(warm_ttft) < min(cold_ttft)  # hits skip prefill


def test_prefix_block_keys_cover_full_blocks_of_the_shared_prefix_only() -> None:
    schedule = Schedule(
        target_s=np.zeros(3),
        prompt_tokens=np.array([100, 40, 100]),
        output_tokens=np.ones(3, dtype=np.int64),
        prefix_group=np.array([0, 0, -1]),
        prefix_tokens=np.array([50, 50, 0]),
    )
    keys = prefix_block_keys(schedule, 16)
    assert keys[0] == ((0, 0), (0, 1), (0, 2))
    assert keys[1] == ((0, 0), (0, 1))  # its prefix is cut at its 40 tokens
    assert keys[2] == ()
