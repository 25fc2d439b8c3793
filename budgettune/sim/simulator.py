"""The discrete-event simulator: a Schedule through the Scheduler in virtual time, timed by the
StepModel, one RequestRecord per request with every token's time. Deterministic; runs of
decode-only iterations between events advance in one jump.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.records import RequestRecord
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import Scheduler, SchedulerConfig
from budgettune.trace.prefix_blocks import prefix_block_keys as trace_block_keys
from budgettune.trace.schedule import Schedule

_JUMP_MIN_ITERATIONS = 2  # below this a normal schedule/commit is as cheap


@dataclass(frozen=True, slots=True)
class SimResult:
    """Records (in schedule order, request_id = index) and run-wide counters."""

    records: list[RequestRecord]
    iterations: int
    decode_iterations: int
    preemptions: int
    makespan_s: float  # end of the last iteration
    prefix_cache: PrefixCacheCount | None = None  # None: the scheduler kept no prefix cache


def prefix_block_keys(schedule: Schedule, block_size: int) -> list[Sequence[Hashable]]:
    """Each request's chain keys for the full blocks of its shared prefix
    (:func:`budgettune.trace.prefix_blocks.prefix_block_keys`)."""
    return trace_block_keys(
        schedule.prompt_tokens, schedule.prefix_group, schedule.prefix_tokens, block_size,
        schedule.shared_blocks,
    )  # fmt: skip


def simulate(
    schedule: Schedule,
    model: StepModel,
    config: SchedulerConfig,
    *,
    concurrency: int | None = None,
) -> SimResult:
    """Run every request of ``schedule`` to completion. A request that can never fit the KV
    cache is not run; its record carries the reason in ``error`` and no tokens.

    ``concurrency`` N: a closed loop, as the load generator's ``--concurrency``: the first N
    requests arrive at 0 and each later one the moment an earlier one finishes (or is refused);
    the schedule's times are not used, and each record's ``target_s``/``sent_s`` is its arrival.
    """
    n = len(schedule)
    if concurrency is None:
        arrivals = schedule.target_s.tolist()
        opened = n
    else:
        opened = min(max(1, concurrency), n)  # requests given an arrival time so far
        arrivals = [0.0] * opened + [float("inf")] * (n - opened)
    prompts = schedule.prompt_tokens.tolist()
    outputs = schedule.output_tokens.tolist()
    sched = Scheduler(config, keep_finished=True)
    keys = prefix_block_keys(schedule, config.block_size) if config.prefix_caching else [()] * n
    step = model.step_time_s
    rejected: dict[int, str] = {}
    iteration_end: list[float] = []  # end time of every iteration
    tick_end: list[float] = []  # end time of every iteration that held decodes
    t = 0.0
    i = 0
    next_arrival = arrivals[0] if n else float("inf")
    while True:
        # Requests that arrived by the start of this iteration join the queue.
        while next_arrival <= t:
            reason = sched.rejection(prompts[i], outputs[i])
            if reason is None:
                sched.add(i, prompts[i], outputs[i], keys[i])
            else:
                rejected[i] = reason
                if opened < n:  # closed loop: a refused request frees its slot at once
                    arrivals[opened] = t
                    opened += 1
            i += 1
            next_arrival = arrivals[i] if i < n else float("inf")
        if not sched.has_work:
            if i >= n:
                break
            if next_arrival == float("inf"):  # a closed loop whose slots all leaked
                raise RuntimeError(f"request {i} never arrives: no request left in flight")
            t = next_arrival  # idle until the next arrival
            continue
        plan = sched.schedule()
        if plan.empty:
            raise RuntimeError(f"scheduler made no progress at iteration {plan.index}")
        t += step(
            plan.prefill_tokens,
            plan.prefill_pairs,
            plan.prefill_prefix_tokens,
            plan.decodes,
            plan.decode_context_tokens,
            len(plan.chunks),
        )
        iteration_end.append(t)
        if plan.decodes:
            tick_end.append(t)
        outcome = sched.commit(plan)
        if opened < n and outcome.finished_ids:
            # Closed loop: each finish sends the next request now.
            for _ in outcome.finished_ids:
                if opened < n:
                    arrivals[opened] = t
                    opened += 1
            next_arrival = arrivals[i] if i < n else float("inf")
        # Jump over decode-only iterations up to the next finish or arrival.
        horizon = sched.decode_only_horizon()
        if horizon >= _JUMP_MIN_ITERATIONS and next_arrival > t:
            decodes = sched.num_decoding
            context = sched.next_decode_context_tokens()
            done = 0
            while done < horizon and t < next_arrival:
                t += step(0, 0.0, 0, decodes, context)
                tick_end.append(t)
                context += decodes
                done += 1
            iteration_end.extend(tick_end[len(tick_end) - done :])
            sched.advance_decode_only(done)
    records = _records(
        schedule,
        np.asarray(arrivals),
        sched,
        rejected,
        np.asarray(iteration_end),
        np.asarray(tick_end),
    )
    return SimResult(
        records=records,
        iterations=sched.iterations,
        decode_iterations=sched.ticks,
        preemptions=sched.preemptions_total,
        makespan_s=t,
        prefix_cache=(
            PrefixCacheCount(sched.prefix_cache_queries_tokens, sched.prefix_cache_hits_tokens)
            if config.prefix_caching
            else None
        ),
    )


def _records(
    schedule: Schedule,
    arrivals_s: np.ndarray,
    sched: Scheduler,
    rejected: dict[int, str],
    iteration_end: np.ndarray,
    tick_end: np.ndarray,
) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    for i in range(len(schedule)):
        target = float(arrivals_s[i])
        record = RequestRecord(
            request_id=i,
            prompt_tokens=int(schedule.prompt_tokens[i]),
            output_tokens=int(schedule.output_tokens[i]),
            target_s=target,
            sent_s=target,
        )
        if i in rejected:
            record.error = f"rejected: {rejected[i]}"
            out.append(record)
            continue
        segments = sched.segments(i)
        if len(segments) == 1:
            first_iteration, tick0, decodes = segments[0]
            times = np.empty(1 + decodes)
            times[0] = iteration_end[first_iteration]
            times[1:] = tick_end[tick0 : tick0 + decodes]
        else:
            parts = []
            for first_iteration, tick0, decodes in segments:
                parts.append(iteration_end[first_iteration : first_iteration + 1])
                parts.append(tick_end[tick0 : tick0 + decodes])
            times = np.concatenate(parts)
        record.token_times_s = times
        record.preemptions = sched.preemptions(i)
        out.append(record)
    return out
