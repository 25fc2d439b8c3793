"""A deliberately naive reference of the BRIEF section 4 scheduler and simulator for tests.

Every request carries its own KV length and block count and every iteration loops over all of
them, so it is slow but easy to check by eye. The fast simulator must match it exactly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from budgettune.model.stepmodel import StepModel
from budgettune.sim.kvcache import blocks_for
from budgettune.sim.scheduler import SchedulerConfig, chunk_tokens


@dataclass(eq=False)
class RefRequest:
    index: int
    prompt: int
    output: int
    arrival_s: float
    prefill_len: int = 0
    prefilled: int = 0
    kv_tokens: int = 0
    blocks: int = 0
    decoding: bool = False
    times: list[float] = field(default_factory=list)
    preemptions: int = 0
    rejected: bool = False


def reference_simulate(
    arrivals_s: list[float],
    prompts: list[int],
    outputs: list[int],
    model: StepModel,
    config: SchedulerConfig,
) -> list[RefRequest]:
    bs = config.block_size
    reqs = [
        RefRequest(i, p, o, a, prefill_len=p)
        for i, (a, p, o) in enumerate(zip(arrivals_s, prompts, outputs, strict=True))
    ]
    pending = deque(reqs)
    waiting: deque[RefRequest] = deque()
    running: list[RefRequest] = []  # admission order
    used = 0
    t = 0.0

    def preempt(r: RefRequest) -> None:
        nonlocal used
        running.remove(r)
        used -= r.blocks
        r.blocks = r.kv_tokens = r.prefilled = 0
        r.decoding = False
        r.prefill_len = r.prompt + len(r.times)
        r.preemptions += 1
        waiting.appendleft(r)

    def decode_phase(decoders: list[RefRequest]) -> bool:
        """Grow every decoder by one token; preempt the newest while blocks lack."""
        nonlocal used
        preempted = False
        while True:
            current = [r for r in running if r.decoding]
            need = sum(blocks_for(r.kv_tokens + 1, bs) - r.blocks for r in current)
            if config.kv_capacity_blocks - used >= need:
                break
            preempt(running[-1])
            preempted = True
        for r in current:
            grow = blocks_for(r.kv_tokens + 1, bs) - r.blocks
            r.blocks += grow
            used += grow
            decoders.append(r)
        return preempted

    def admit(r: RefRequest, n: int, chunks: list[tuple[RefRequest, int]]) -> bool:
        nonlocal used
        need = blocks_for(n, bs)
        if config.kv_capacity_blocks - used < need:
            return False
        waiting.popleft()
        running.append(r)
        r.blocks = need
        used += need
        chunks.append((r, n))
        return True

    while pending or waiting or running:
        while pending and pending[0].arrival_s <= t:
            r = pending.popleft()
            if blocks_for(r.prompt + r.output - 1, bs) > config.kv_capacity_blocks:
                r.rejected = True
            else:
                waiting.append(r)
        if not waiting and not running:
            if not pending:
                break
            t = pending[0].arrival_s
            continue
        chunks: list[tuple[RefRequest, int]] = []
        decoders: list[RefRequest] = []
        preempted = False
        if config.budget_tokens is None:
            total = 0
            while waiting and len(running) < config.max_num_seqs:
                r = waiting[0]
                cap = config.prefill_first_max_tokens
                if cap is not None and chunks and total + r.prefill_len > cap:
                    break
                if not admit(r, r.prefill_len, chunks):
                    break
                total += r.prefill_len
            if not chunks:
                decode_phase(decoders)
        else:
            left = config.budget_tokens
            preempted = decode_phase(decoders)
            left -= len(decoders)
            for r in [r for r in running if not r.decoding]:
                if left <= 0:
                    break
                if r not in running:
                    continue
                n = chunk_tokens(left, r.prefill_len - r.prefilled, config)
                if n <= 0:
                    break
                need = blocks_for(r.prefilled + n, bs) - r.blocks
                while config.kv_capacity_blocks - used < need:
                    victim = running[-1]
                    if victim in decoders:
                        decoders.remove(victim)
                    preempt(victim)
                    preempted = True
                    if victim is r:
                        break
                if r not in running:
                    continue
                r.blocks += need
                used += need
                chunks.append((r, n))
                left -= n
            if not preempted:
                while left > 0 and waiting and len(running) < config.seq_limit:
                    r = waiting[0]
                    n = chunk_tokens(left, r.prefill_len, config)
                    if n <= 0 or not admit(r, n, chunks):
                        break
                    left -= n
        assert chunks or decoders, "no progress"
        t += model.iteration_time_s(
            [(n, r.prefilled) for r, n in chunks], [r.kv_tokens + 1 for r in decoders]
        )
        for r in decoders:
            r.kv_tokens += 1
            r.times.append(t)
        for r, n in chunks:
            r.prefilled += n
            r.kv_tokens = r.prefilled
            if r.prefilled == r.prefill_len:
                r.decoding = True
                r.times.append(t)
        for r in list(running):
            if r.decoding and len(r.times) == r.output:
                running.remove(r)
                used -= r.blocks
    return reqs
