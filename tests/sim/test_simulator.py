"""Simulator: a hand-computed run, exact agreement with a naive reference, determinism, speed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_reference import reference_simulate

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.schedule import Schedule, synthetic_schedule

MODEL = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))


def _schedule(arrivals: list[float], prompts: list[int], outputs: list[int]) -> Schedule:
    return Schedule(
        target_s=np.asarray(arrivals, dtype=np.float64),
        prompt_tokens=np.asarray(prompts, dtype=np.int64),
        output_tokens=np.asarray(outputs, dtype=np.int64),
    )


def test_two_requests_hand_computed() -> None:
    # A: 100-token prompt, 3 outputs; B: 30-token prompt, 2 outputs; both at t=0; budget 64.
    config = SchedulerConfig(budget_tokens=64, kv_capacity_blocks=1000, block_size=16)
    result = simulate(_schedule([0.0, 0.0], [100, 30], [3, 2]), MODEL, config)
    step = MODEL.step_time_s
    # it0: A chunk 64@0.
    t0 = step(64, 64 * 64 / 2, 0, 0, 0)
    # it1: A chunk 36@64 (completes: A's first token), B chunk 28@0: two sequences.
    t1 = t0 + step(64, 36 * 64 + 36 * 36 / 2 + 28 * 28 / 2, 64, 0, 0, 2)
    # it2: A decodes at context 101; B chunk 2@28 completes (B's first token).
    t2 = t1 + step(2, 2 * 28 + 2 * 2 / 2, 28, 1, 101)
    # it3: A at context 102 (its last token), B at 31 (its last token).
    t3 = t2 + step(0, 0, 0, 2, 133)
    a, b = result.records
    np.testing.assert_array_equal(a.token_times_s, [t1, t2, t3])
    np.testing.assert_array_equal(b.token_times_s, [t2, t3])
    assert result.iterations == 4 and result.decode_iterations == 2
    assert result.makespan_s == t3
    assert a.ok and b.ok and a.preemptions == b.preemptions == 0


def test_prefill_first_runs_prompts_alone() -> None:
    # A arrives at 0 (prompt 50, 4 outputs), B during A's prefill: B's whole prompt runs next,
    # pausing A's decodes, then both decode together.
    config = SchedulerConfig(budget_tokens=None, kv_capacity_blocks=1000)
    step = MODEL.step_time_s
    t0 = step(50, 50 * 50 / 2, 0, 0, 0)
    result = simulate(_schedule([0.0, t0 / 2], [50, 500], [4, 2]), MODEL, config)
    t1 = t0 + step(500, 500 * 500 / 2, 0, 0, 0)
    t2 = t1 + step(0, 0, 0, 2, 51 + 501)
    t3 = t2 + step(0, 0, 0, 1, 52)
    t4 = t3 + step(0, 0, 0, 1, 53)
    a, b = result.records
    np.testing.assert_array_equal(a.token_times_s, [t0, t2, t3, t4])
    np.testing.assert_array_equal(b.token_times_s, [t1, t2])


def test_idle_gap_and_rejected_request() -> None:
    config = SchedulerConfig(budget_tokens=512, kv_capacity_blocks=10, block_size=16)
    # The second request needs blocks_for(150 + 20 - 1) = 11 > 10 blocks: rejected.
    result = simulate(_schedule([0.0, 0.5, 2.0], [100, 150, 10], [5, 20, 1]), MODEL, config)
    first, rejected, late = result.records
    assert first.ok and len(first.token_times_s) == 5
    assert rejected.error is not None and "11 KV blocks" in rejected.error
    assert len(rejected.token_times_s) == 0 and not rejected.ok
    # The third arrives after the first finished: it starts at its arrival, alone.
    assert late.token_times_s[0] == 2.0 + MODEL.step_time_s(10, 50.0, 0, 0, 0)


workloads = st.integers(1, 14).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 0.2, allow_nan=False), min_size=n, max_size=n),
        st.lists(st.integers(1, 300), min_size=n, max_size=n),
        st.lists(st.integers(1, 60), min_size=n, max_size=n),
    )
)
configs = st.builds(
    SchedulerConfig,
    budget_tokens=st.sampled_from([None, 16, 32, 48, 64, 100, 256, 1024]),
    kv_capacity_blocks=st.integers(4, 60),
    max_num_seqs=st.integers(1, 8),
    block_size=st.sampled_from([1, 4, 16]),
    long_prefill_token_threshold=st.sampled_from([0, 0, 20, 64]),
    prefill_first_max_tokens=st.sampled_from([None, 200]),
)


@settings(max_examples=300, deadline=None)
@given(workload=workloads, config=configs, aligned=st.booleans())
def test_matches_naive_reference(
    workload: tuple[list[float], list[int], list[int]], config: SchedulerConfig, aligned: bool
) -> None:
    if (
        aligned
        and config.budget_tokens is not None
        and (
            config.budget_tokens % config.block_size == 0
            and not 0 < config.long_prefill_token_threshold < config.block_size
        )
    ):
        config = SchedulerConfig(
            budget_tokens=config.budget_tokens,
            kv_capacity_blocks=config.kv_capacity_blocks,
            max_num_seqs=config.max_num_seqs,
            block_size=config.block_size,
            block_aligned_chunks=True,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
        )
    arrivals, prompts, outputs = workload
    arrivals = sorted(arrivals)
    result = simulate(_schedule(arrivals, prompts, outputs), MODEL, config)
    reference = reference_simulate(arrivals, prompts, outputs, MODEL, config)
    for record, ref in zip(result.records, reference, strict=True):
        assert (record.error is not None) == ref.rejected
        np.testing.assert_array_equal(record.token_times_s, ref.times)
        assert record.preemptions == ref.preemptions
        if not ref.rejected:
            assert len(record.token_times_s) == record.output_tokens
            assert np.all(np.diff(record.token_times_s) > 0)
            assert record.token_times_s[0] > record.target_s


def _default_schedule(seed: int, rate: float = 16.0, requests: int = 300) -> Schedule:
    return synthetic_schedule(
        prompt_dist=parse_length_dist("lognormal:mean=1000,sigma=1.0,max=8192"),
        output_dist=parse_length_dist("lognormal:mean=250,sigma=1.0,max=4096"),
        rate_per_s=rate,
        requests=requests,
        seed=seed,
    )


@pytest.mark.parametrize("budget", [256, 2048, None])
def test_deterministic_for_a_seed(budget: int | None) -> None:
    config = SchedulerConfig(budget_tokens=budget, kv_capacity_blocks=3000)
    first = simulate(_default_schedule(7), MODEL, config)
    again = simulate(_default_schedule(7), MODEL, config)
    other = simulate(_default_schedule(8), MODEL, config)
    assert first.iterations == again.iterations and first.makespan_s == again.makespan_s
    for a, b in zip(first.records, again.records, strict=True):
        np.testing.assert_array_equal(a.token_times_s, b.token_times_s)
    assert first.makespan_s != other.makespan_s


def test_large_run_matches_reference_with_preemptions() -> None:
    # Enough load on a small cache that preemption and decode-only jumps both happen.
    schedule = _default_schedule(3, rate=20.0, requests=120)
    config = SchedulerConfig(budget_tokens=512, kv_capacity_blocks=1500, max_num_seqs=64)
    result = simulate(schedule, MODEL, config)
    reference = reference_simulate(
        schedule.target_s.tolist(),
        schedule.prompt_tokens.tolist(),
        schedule.output_tokens.tolist(),
        MODEL,
        config,
    )
    assert result.preemptions > 0
    assert result.preemptions == sum(r.preemptions for r in reference)
    for record, ref in zip(result.records, reference, strict=True):
        np.testing.assert_array_equal(record.token_times_s, ref.times)


@pytest.mark.parametrize("budget", [256, None])
def test_closed_loop_keeps_n_in_flight_and_sends_on_each_finish(budget: int | None) -> None:
    rng = np.random.default_rng(3)
    n, slots = 40, 4
    schedule = _schedule(
        list(np.linspace(0.0, 0.01, n)),  # arrival times a closed loop must not use
        list(rng.integers(20, 600, n)),
        list(rng.integers(1, 60, n)),
    )
    config = SchedulerConfig(budget_tokens=budget, kv_capacity_blocks=1000, block_size=16)
    records = simulate(schedule, MODEL, config, concurrency=slots).records
    ends = [float(r.token_times_s[-1]) for r in records]
    for r, want in zip(records, schedule.output_tokens, strict=True):
        assert r.error is None and len(r.token_times_s) == want
        assert r.sent_s == r.target_s
    # The first N arrive at 0; each later one the moment an earlier one finished, in order.
    assert [r.sent_s for r in records[:slots]] == [0.0] * slots
    finishes = sorted(ends)
    for k, r in enumerate(records[slots:]):
        assert r.sent_s == finishes[k], (k, r.sent_s, finishes[k])
    # Never more than N in flight: at each arrival, the requests sent before and not finished.
    for r in records:
        in_flight = sum(
            1 for o, end in zip(records, ends, strict=True) if o.sent_s <= r.sent_s < end
        )
        assert in_flight <= slots
    # Without the loop, the same schedule's times are used (all within 10 ms).
    open_loop = simulate(schedule, MODEL, config).records
    assert max(r.sent_s for r in open_loop) <= 0.01
