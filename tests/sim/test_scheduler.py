"""Scheduler invariants (property-based), the budget rule, config checks and the request API."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from budgettune.core.errors import SpecError
from budgettune.sim.kvcache import blocks_for
from budgettune.sim.scheduler import RequestState, Scheduler, SchedulerConfig, chunk_tokens

# One request: (iteration it arrives before, prompt tokens, output tokens, abort iteration | None).
requests_st = st.lists(
    st.tuples(
        st.integers(0, 30),
        st.integers(1, 200),
        st.integers(1, 40),
        st.one_of(st.none(), st.integers(0, 80)),
    ),
    min_size=1,
    max_size=16,
)


def _config(aligned: bool, **kwargs: object) -> SchedulerConfig:
    """Block-aligned chunks when asked and the budget allows them (a whole number of blocks,
    as vLLM requires), else plain chunks."""
    config = SchedulerConfig(**kwargs)  # type: ignore[arg-type]
    budget, block = config.budget_tokens, config.block_size
    if aligned and budget is not None and budget % block == 0:
        return SchedulerConfig(**kwargs, block_aligned_chunks=True)  # type: ignore[arg-type]
    return config


config_st = st.builds(
    _config,
    aligned=st.booleans(),
    budget_tokens=st.sampled_from([None, 8, 16, 33, 64, 128, 512]),
    kv_capacity_blocks=st.integers(14, 80),
    max_num_seqs=st.integers(1, 10),
    block_size=st.sampled_from([1, 4, 16]),
    long_prefill_token_threshold=st.sampled_from([0, 0, 24]),
    prefill_first_max_tokens=st.sampled_from([None, 150]),
    decodes_beside_prefill=st.booleans(),
)


@settings(max_examples=400, deadline=None)
@given(requests=requests_st, config=config_st)
def test_invariants_hold_on_random_workloads(
    requests: list[tuple[int, int, int, int | None]], config: SchedulerConfig
) -> None:
    sched = Scheduler(config)
    by_iteration: dict[int, list[int]] = defaultdict(list)
    for rid, (arrive, _, _, _) in enumerate(requests):
        by_iteration[arrive].append(rid)
    aborts: dict[int, list[int]] = defaultdict(list)
    for rid, (_, _, _, abort_at) in enumerate(requests):
        if abort_at is not None:
            aborts[abort_at].append(rid)
    prefilled = {rid: 0 for rid in range(len(requests))}  # tokens computed since (re)admission
    kv_tokens = {rid: 0 for rid in range(len(requests))}
    emitted = {rid: 0 for rid in range(len(requests))}
    prompt_work = {rid: 0 for rid in range(len(requests))}  # prompt tokens ever scheduled
    decoding: set[int] = set()
    finished: set[int] = set()
    aborted: set[int] = set()
    preempted: set[int] = set()
    added: set[int] = set()
    iteration = 0
    while iteration < 5000:
        for rid in by_iteration.pop(iteration, []):
            _, prompt, output, _ = requests[rid]
            if sched.rejection(prompt, output) is None:
                sched.add(rid, prompt, output)
                added.add(rid)
        for rid in aborts.pop(iteration, []):
            if sched.abort(rid):
                aborted.add(rid)
                decoding.discard(rid)
                kv_tokens[rid] = 0
        if not sched.has_work and not by_iteration:
            break
        if not sched.has_work:
            iteration += 1
            continue
        plan = sched.schedule()
        assert not plan.empty, "the scheduler must make progress when it has work"
        for rid in plan.preempted:
            preempted.add(rid)
            decoding.discard(rid)
            prefilled[rid] = kv_tokens[rid] = 0
        # The budget is never exceeded; prefill-first and SGLang's rule never mix decodes with
        # prompts.
        mixes = config.budget_tokens is not None and config.decodes_beside_prefill
        if config.budget_tokens is not None:
            assert plan.tokens <= config.budget_tokens
        if plan.chunks and not mixes:
            assert plan.decodes == 0
        # Every running decode gets its token before any prompt token is scheduled (vLLM), or
        # in every iteration without prompt chunks.
        if mixes or not plan.chunks:
            assert plan.decodes == len(decoding)
        if plan.decodes:
            assert plan.decode_context_tokens == sum(kv_tokens[r] + 1 for r in decoding)
        # Chunks continue exactly where the request's prefill stands; block-aligned, a chunk
        # that does not finish its prefill (prompt + tokens emitted before a preemption) is
        # whole KV blocks.
        for rid, n, offset in plan.chunks:
            assert n > 0 and offset == prefilled[rid]
            if config.block_aligned_chunks and offset + n < requests[rid][1] + emitted[rid]:
                assert n % config.block_size == 0, (n, config.block_size)
            prefilled[rid] += n
            kv_tokens[rid] = prefilled[rid]
            prompt_work[rid] += n
        for rid in decoding if plan.decodes else ():
            kv_tokens[rid] += 1
        # Sequences and KV capacity hold; every request's blocks match its KV tokens.
        assert sched.num_running <= config.seq_limit
        assert sched.kv_used_blocks <= config.kv_capacity_blocks
        held = sched.kv_blocks_by_request()
        assert sum(held.values()) == sched.kv_used_blocks
        for rid, blocks in held.items():
            assert blocks == blocks_for(kv_tokens[rid], config.block_size)
        outcome = sched.commit(plan, with_ids=True)
        assert outcome.emitted_ids is not None
        assert len(outcome.emitted_ids) == outcome.emitted_tokens
        assert len(set(outcome.emitted_ids)) == len(outcome.emitted_ids)
        for rid in outcome.emitted_ids:
            assert rid not in finished and rid not in aborted
            emitted[rid] += 1
        for rid in outcome.first_token_ids:
            decoding.add(rid)
            prefilled[rid] = 0
        for rid in outcome.finished_ids:
            finished.add(rid)
            decoding.discard(rid)
            assert emitted[rid] == requests[rid][2]
        iteration += 1
    assert not sched.has_work and sched.kv_used_blocks == 0 and sched.num_running == 0
    event(f"preempted: {bool(preempted)}, aborted: {bool(aborted)}")
    event(f"block-aligned: {config.block_aligned_chunks}")
    for rid in added:
        _, prompt, output, _ = requests[rid]
        if rid in aborted:
            assert rid not in finished and emitted[rid] < output
            continue
        # Every request finishes with exactly its output length...
        assert rid in finished and emitted[rid] == output
        # ...and every prompt token is prefilled once unless the request was preempted.
        if rid not in preempted:
            assert prompt_work[rid] == prompt


def test_budget_rule() -> None:
    plain = SchedulerConfig(budget_tokens=512, kv_capacity_blocks=100)
    assert chunk_tokens(512, 1000, plain) == 512
    assert chunk_tokens(300, 100, plain) == 100
    assert chunk_tokens(0, 100, plain) == 0
    capped = SchedulerConfig(
        budget_tokens=512, kv_capacity_blocks=100, long_prefill_token_threshold=64
    )
    assert chunk_tokens(512, 1000, capped) == 64
    assert chunk_tokens(512, 50, capped) == 50
    aligned = SchedulerConfig(budget_tokens=512, kv_capacity_blocks=100, block_aligned_chunks=True)
    assert chunk_tokens(300, 1000, aligned) == 288  # (300 // 16) * 16
    assert chunk_tokens(280, 290, aligned) == 272
    assert chunk_tokens(300, 200, aligned) == 200  # finishing the prompt needs no alignment
    assert chunk_tokens(15, 1000, aligned) == 0


def test_decodes_first_then_partial_then_admissions() -> None:
    sched = Scheduler(SchedulerConfig(budget_tokens=100, kv_capacity_blocks=100, block_size=16))
    sched.add("a", 10, 5)
    sched.add("b", 150, 5)
    sched.add("c", 20, 5)
    plan = sched.schedule()
    assert plan.chunks == [("a", 10, 0), ("b", 90, 0)]  # c waits: budget spent
    out = sched.commit(plan)
    assert out.first_token_ids == ["a"] and out.emitted_tokens == 1
    plan = sched.schedule()
    # a decodes (1 token, context 11), b continues with 60, c gets the remaining 20... of 39.
    assert plan.decodes == 1 and plan.decode_context_tokens == 11
    assert plan.chunks == [("b", 60, 90), ("c", 20, 0)]
    assert plan.tokens == 81
    out = sched.commit(plan, with_ids=True)
    assert out.emitted_ids == ["a", "b", "c"] and out.first_token_ids == ["b", "c"]


def test_sglang_rule_runs_prompt_chunks_apart_from_decodes() -> None:
    # SGLang without --enable-mixed-chunk: while a prompt has chunks left, the decoders wait;
    # each chunk gets the whole budget; decode batches are not bounded by the chunk size.
    config = SchedulerConfig(
        budget_tokens=100, kv_capacity_blocks=100, block_size=16, decodes_beside_prefill=False
    )
    assert config.seq_limit == 256
    sched = Scheduler(config)
    sched.add("a", 10, 5)
    plan = sched.schedule()
    sched.commit(plan)  # a prefilled; it decodes next
    sched.add("b", 250, 5)
    chunks = []
    for _ in range(3):
        plan = sched.schedule()
        assert plan.decodes == 0  # a waits while b is prefilled
        chunks += plan.chunks
        sched.commit(plan)
    assert chunks == [("b", 100, 0), ("b", 100, 100), ("b", 50, 200)]
    plan = sched.schedule()
    assert plan.decodes == 2 and not plan.chunks  # then a and b decode together
    # vLLM's rule on the same arrivals: a decodes beside each of b's chunks.
    vllm = Scheduler(SchedulerConfig(budget_tokens=100, kv_capacity_blocks=100, block_size=16))
    vllm.add("a", 10, 5)
    vllm.commit(vllm.schedule())
    vllm.add("b", 250, 5)
    plan = vllm.schedule()
    assert plan.decodes == 1 and plan.chunks == [("b", 99, 0)]


def test_max_num_seqs_and_seq_limit_from_budget() -> None:
    assert SchedulerConfig(budget_tokens=8, kv_capacity_blocks=10, max_num_seqs=256).seq_limit == 8
    assert SchedulerConfig(budget_tokens=None, kv_capacity_blocks=10, max_num_seqs=3).seq_limit == 3
    sched = Scheduler(SchedulerConfig(budget_tokens=1000, kv_capacity_blocks=100, max_num_seqs=2))
    for rid in range(3):
        sched.add(rid, 10, 3)
    plan = sched.schedule()
    assert [c[0] for c in plan.chunks] == [0, 1]
    assert sched.num_running == 2 and sched.num_waiting == 1


def test_preemption_by_recompute_newest_first() -> None:
    # 4 blocks of 16: two 20-token prompts take 2 each; at context 33 both need a third block.
    sched = Scheduler(SchedulerConfig(budget_tokens=64, kv_capacity_blocks=4, block_size=16))
    sched.add("old", 20, 20)
    sched.add("new", 20, 20)
    plans = []
    while sched.preemptions_total == 0:
        plan = sched.schedule()
        plans.append(plan)
        sched.commit(plan)
    assert plans[-1].preempted == ["new"]
    assert plans[-1].index == 13  # tick 13: contexts reach 33
    assert plans[-1].decodes == 1 and plans[-1].decode_context_tokens == 33
    assert sched.state("new") is RequestState.WAITING and sched.preemptions("new") == 1
    # 13 tokens emitted before the preemption: recompute 20 + 13 = 33 tokens later.
    assert sched.segments("new") == [(0, 0, 12)]
    while sched.state("new") is RequestState.WAITING:
        plan = sched.schedule()
        sched.commit(plan)
    assert plan.chunks == [("new", 33, 0)]


def test_abort_frees_blocks_in_every_state() -> None:
    sched = Scheduler(SchedulerConfig(budget_tokens=32, kv_capacity_blocks=50, block_size=16))
    sched.add("decoder", 10, 10)
    sched.add("partial", 100, 10)
    sched.add("waiting", 10, 10)
    sched.commit(sched.schedule())  # decoder done prefilling, partial has 22 tokens
    assert sched.state("decoder") is RequestState.DECODING
    assert sched.state("partial") is RequestState.PREFILLING
    plan = sched.schedule()  # in flight: the decoder's token and the partial's chunk
    assert sched.abort("partial") and sched.abort("decoder") and sched.abort("waiting")
    assert not sched.abort("decoder") and not sched.abort("unknown")
    out = sched.commit(plan, with_ids=True)
    assert out.emitted_ids == [] and out.first_token_ids == []
    assert sched.kv_used_blocks == 0 and not sched.has_work


def test_add_rejects_what_can_never_fit_and_duplicates() -> None:
    sched = Scheduler(SchedulerConfig(budget_tokens=64, kv_capacity_blocks=4, block_size=16))
    assert sched.rejection(60, 5) is None  # 64 KV tokens at most = 4 blocks
    assert "5 KV blocks" in (sched.rejection(60, 6) or "")
    with pytest.raises(ValueError, match="KV blocks"):
        sched.add(1, 60, 6)
    sched.add(1, 10, 2)
    with pytest.raises(ValueError, match="already"):
        sched.add(1, 10, 2)


def test_schedule_and_commit_alternate() -> None:
    sched = Scheduler(SchedulerConfig(budget_tokens=64, kv_capacity_blocks=10))
    sched.add(0, 10, 2)
    plan = sched.schedule()
    with pytest.raises(RuntimeError):
        sched.schedule()
    sched.commit(plan)
    with pytest.raises(RuntimeError):
        sched.commit(plan)
    assert sched.schedule().decodes == 1


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"budget_tokens": 0}, "budgets", "must be positive"),
        ({"budget_tokens": 64, "max_num_seqs": 0}, "max_num_seqs", "must be positive"),
        ({"budget_tokens": 64, "block_size": 0}, "block_size", "must be positive"),
        (
            {"budget_tokens": 100, "block_aligned_chunks": True},
            "budgets",
            "multiple of the block size",
        ),
        (
            {"budget_tokens": 64, "long_prefill_token_threshold": -1},
            "long_prefill_token_threshold",
            r"0 \(off\) or positive",
        ),
    ],
)
def test_config_errors_name_the_field(kwargs: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(SpecError, match=message) as caught:
        SchedulerConfig(kv_capacity_blocks=10, **kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert "--" not in caught.value.message  # the library names fields, the CLI names flags
