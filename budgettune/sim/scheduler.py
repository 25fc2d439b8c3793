"""The token-budget scheduler of BRIEF section 4 (vLLM V1): 1. decodes, 2. partial prefills,
3. FCFS admissions under budget, sequences and KV blocks; preemption by recompute; prefill-first
when the budget is None. O(events) per iteration: decode aggregates are kept incrementally.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from budgettune.core.errors import SpecError
from budgettune.core.limits import MAX_BLOCK_TOKENS, MAX_SEQS, check_count, check_tokens
from budgettune.sim.iteration import IterationOutcome, IterationPlan, RequestId
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE, BlockPool, blocks_for
from budgettune.sim.prefix_cache import CachingBlockPool

__all__ = [
    "IterationOutcome",
    "IterationPlan",
    "RequestId",
    "RequestState",
    "Scheduler",
    "SchedulerConfig",
    "chunk_tokens",
]


class RequestState(Enum):
    """Where a request stands: waiting (queued, or sent back by a preemption), prefilling
    (admitted, prompt not done), decoding, then finished or aborted (both final)."""

    WAITING = "waiting"
    PREFILLING = "prefilling"
    DECODING = "decoding"
    FINISHED = "finished"
    ABORTED = "aborted"

    @property
    def live(self) -> bool:
        """Queued or running: it holds a place in the scheduler (and maybe KV blocks)."""
        return self is not RequestState.FINISHED and self is not RequestState.ABORTED


# Module-level names for the hot loop: a global lookup and an identity test per check, the
# same cost as the int constants they replace (an attribute lookup on the Enum class is not).
WAITING = RequestState.WAITING
PREFILLING = RequestState.PREFILLING
DECODING = RequestState.DECODING
FINISHED = RequestState.FINISHED
ABORTED = RequestState.ABORTED


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Scheduling policy. ``budget_tokens=None`` selects prefill-first (the ``none`` policy).

    long_prefill_token_threshold: 0 = off, else the most prompt tokens one request takes per
    iteration (vLLM --long-prefill-token-threshold). block_aligned_chunks: a chunk that does
    not finish its prompt is cut to whole KV blocks, (left // block_size) * block_size, as vLLM
    does with prefix caching. prefill_first_max_tokens: the ``none`` policy's cap on prompt
    tokens per iteration (None: only sequences and KV blocks limit it; a longer prompt still
    runs alone). decodes_beside_prefill: True is vLLM's rule (every running decode takes one
    token of each iteration's budget, prompt chunks fill the rest); False is SGLang's default
    (``--enable-mixed-chunk`` off): an iteration with prompt chunks runs them alone, up to the
    budget (its ``--chunked-prefill-size``), and the decoders wait for a prefill-free one.
    prefix_caching: vLLM's prefix cache (:class:`~budgettune.sim.prefix_cache.CachingBlockPool`):
    a request's keyed full prompt blocks are looked up once when it is first scheduled (again
    after a preemption), registered as soon as a chunk schedules them, and stay cached after it
    finishes until the pool hands their blocks out again. prefix_cached_after_iteration: SGLang's
    radix tree takes a request's computed tokens in after the iteration that computed them (a
    chunked request is stashed at the next scheduling step, a finished prefill with its result:
    scheduler.py and scheduler_output_processor_mixin.py, 0.5.23), so a request scheduled in
    the same iteration does not hit them; vLLM caches blocks as soon as they are scheduled.
    """

    budget_tokens: int | None
    kv_capacity_blocks: int
    max_num_seqs: int = 256
    block_size: int = DEFAULT_BLOCK_SIZE
    block_aligned_chunks: bool = False
    long_prefill_token_threshold: int = 0
    prefill_first_max_tokens: int | None = None
    decodes_beside_prefill: bool = True
    prefix_caching: bool = False
    prefix_cached_after_iteration: bool = False

    def __post_init__(self) -> None:
        if self.budget_tokens is not None and self.budget_tokens < 1:
            raise SpecError(f"a budget must be positive, got {self.budget_tokens}", field="budgets")
        if self.budget_tokens is not None:
            check_tokens(self.budget_tokens, field="budgets")
        check_count(self.max_num_seqs, field="max_num_seqs", maximum=MAX_SEQS)
        check_count(self.block_size, field="block_size", maximum=MAX_BLOCK_TOKENS, what="tokens")
        if self.kv_capacity_blocks < 1:
            raise SpecError(f"KV capacity must be at least 1 block, got {self.kv_capacity_blocks}")
        if self.long_prefill_token_threshold < 0:
            raise SpecError(
                f"must be 0 (off) or positive, got {self.long_prefill_token_threshold}",
                field="long_prefill_token_threshold",
            )
        check_tokens(
            self.long_prefill_token_threshold, field="long_prefill_token_threshold", minimum=0
        )
        if self.block_aligned_chunks and self.budget_tokens is not None:
            # Same rule as vLLM: aligned chunks need a budget of whole blocks, else no chunk fits.
            if self.budget_tokens % self.block_size:
                raise SpecError(
                    f"{self.budget_tokens} is not a multiple of the block size "
                    f"{self.block_size}, required with block-aligned chunks",
                    field="budgets",
                )
            if 0 < self.long_prefill_token_threshold < self.block_size:
                raise SpecError(
                    f"must be at least the block size {self.block_size} with block-aligned chunks",
                    field="long_prefill_token_threshold",
                )

    @property
    def seq_limit(self) -> int:
        """Running sequences allowed: every running decode takes one token of the budget, so
        more than ``budget`` sequences could never all decode (vLLM refuses such a config).
        Without decodes beside prefills (SGLang) the budget bounds prompt tokens only."""
        if self.budget_tokens is None or not self.decodes_beside_prefill:
            return self.max_num_seqs
        return min(self.max_num_seqs, self.budget_tokens)


def chunk_tokens(left_tokens: int, remaining_tokens: int, config: SchedulerConfig) -> int:
    """The budget rule: prompt tokens a request gets this iteration with ``left_tokens`` of
    budget left and ``remaining_tokens`` of its prompt still to prefill (0: none fits)."""
    n = min(left_tokens, remaining_tokens)
    threshold = config.long_prefill_token_threshold
    if 0 < threshold < n:
        n = threshold
    if config.block_aligned_chunks and n < remaining_tokens:
        n = (n // config.block_size) * config.block_size
    return n


@dataclass(slots=True, eq=False)
class _Request:
    rid: RequestId
    prompt: int
    output: int
    state: RequestState = WAITING
    prefill_len: int = 0  # tokens to prefill: prompt + tokens generated before a preemption
    prefilled: int = 0
    generated: int = 0  # tokens emitted before the current segment
    blocks: int = 0  # KV blocks held while waiting/prefilling (decoders: derived from base)
    base: int = 0  # decoding: context at decode tick T is base + T
    tick0: int = 0  # decoding: ticks committed when the segment's first token came
    first_iteration: int = 0  # iteration index of the segment's first token
    finish_tick: int = 0
    preemptions: int = 0
    keys: Sequence[Hashable] = ()  # chain keys of its full prompt blocks that may be shared
    held: list[Hashable] = field(default_factory=list)  # keyed blocks it holds (prefix cache)
    # One (first-token iteration, tick0, decode tokens) per segment between preemptions.
    segments: list[tuple[int, int, int]] = field(default_factory=list)


class Scheduler:
    """Chunked-prefill scheduler over abstract iterations; it knows no clock.

    Usage, e.g. by a wall-clock engine::

        sched = Scheduler(SchedulerConfig(budget_tokens=2048, kv_capacity_blocks=26_000))
        sched.add("req-1", prompt_tokens=900, output_tokens=128)   # at any time
        plan = sched.schedule()            # plan the next iteration; plan.empty when idle
        dt = plan.step_time_s(step_model)  # aggregates: plan.prefill_tokens, .decodes, ...
        ... wait dt ...                    # sched.abort(id) may come meanwhile
        out = sched.commit(plan, with_ids=True)
        out.emitted_ids    # requests that emitted one token this iteration (first ones too)
        out.finished_ids   # requests that emitted their last token and left
        sched.preemptions_total, plan.tokens   # counters for /metrics

    ``schedule`` and ``commit`` alternate strictly. ``add`` raises ValueError for a request
    that could never fit the KV cache (check first with :meth:`rejection`); ``abort`` drops a
    request in any state (its tokens in an in-flight plan are then discarded). Ids must be
    unique among live requests. A token of a request is emitted at the end of the iteration
    that computed it: a prefill's last chunk emits the first token, each decode one more.
    """

    def __init__(self, config: SchedulerConfig, *, keep_finished: bool = False) -> None:
        self.config = config
        self.pool = (
            CachingBlockPool(config.kv_capacity_blocks)
            if config.prefix_caching
            else BlockPool(config.kv_capacity_blocks)
        )
        self._caching = config.prefix_caching
        # vLLM's prefix_cache_queries / _hits: every request's whole prompt at its first
        # scheduling, and of it the tokens found cached (both 0 without caching)
        self.prefix_cache_queries_tokens = 0
        self.prefix_cache_hits_tokens = 0
        self.preemptions_total = 0
        self.iterations = 0  # committed iterations
        self.ticks = 0  # committed iterations that held decodes ("decode ticks")
        self._keep_finished = keep_finished
        self._requests: dict[RequestId, _Request] = {}
        self._waiting: deque[_Request] = deque()
        self._prefilling: list[_Request] = []  # running, prompt not done, admission order
        self._running_order: list[_Request] = []  # admission order; stale entries skipped
        self._num_running = 0
        # Decoders, kept as aggregates: context of each at tick T is base + T.
        self._decoding: dict[_Request, None] = {}
        self._base_sum = 0
        self._phase = [0] * config.block_size  # decoders needing a new block at T % block_size
        self._finish: dict[int, list[_Request]] = {}  # decode tick -> decoders ending then
        self._finish_ticks: list[int] = []  # heap of keys of _finish
        self._alloc_tick = 0  # decoders' blocks cover contexts up to this tick
        self._in_flight: IterationPlan | None = None
        self._in_flight_requests: list[_Request] = []  # behind the plan's chunks, in order
        self._decode_only_stable = False

    # ----- queries (never change state) -------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return self._num_running

    @property
    def num_decoding(self) -> int:
        return len(self._decoding)

    @property
    def has_work(self) -> bool:
        return self._num_running > 0 or bool(self._waiting)

    @property
    def kv_used_blocks(self) -> int:
        return self.pool.used

    def rejection(self, prompt_tokens: int, output_tokens: int) -> str | None:
        """Why a request could never run (None if it can): its KV at the end of its output."""
        if prompt_tokens < 1 or output_tokens < 1:
            return f"prompt and output need at least 1 token, got {prompt_tokens}/{output_tokens}"
        need = blocks_for(prompt_tokens + output_tokens - 1, self.config.block_size)
        if need > self.config.kv_capacity_blocks:
            return (
                f"needs {need} KV blocks for {prompt_tokens} prompt + {output_tokens} output "
                f"tokens; the cache holds {self.config.kv_capacity_blocks}"
            )
        return None

    def state(self, request_id: RequestId) -> RequestState:
        """Where a live or kept finished request stands (an aborted one is forgotten)."""
        return self._requests[request_id].state

    def segments(self, request_id: RequestId) -> list[tuple[int, int, int]]:
        """Token segments of a finished (kept) or preempted request: (iteration of the first
        token, decode ticks committed then, decode tokens that followed at the next ticks)."""
        return self._requests[request_id].segments

    def preemptions(self, request_id: RequestId) -> int:
        return self._requests[request_id].preemptions

    def kv_blocks_by_request(self) -> dict[RequestId, int]:
        """Blocks each live request holds (O(requests); for checks and tests)."""
        return {rid: self._blocks_of(r) for rid, r in self._requests.items() if r.state.live}

    def next_decode_context_tokens(self) -> int:
        """Sum of decode contexts in the next decode tick (current decoders)."""
        return self._base_sum + len(self._decoding) * (self.ticks + 1)

    # ----- requests in and out ----------------------------------------------------------

    def add(
        self,
        request_id: RequestId,
        prompt_tokens: int,
        output_tokens: int,
        block_keys: Sequence[Hashable] = (),
    ) -> None:
        """Queue a request (FCFS behind earlier ones). Raises ValueError if it cannot fit.

        ``block_keys``: chain keys of its first full prompt blocks whose content other requests
        may share (key j stands for blocks 0..j); used with prefix caching only."""
        reason = self.rejection(prompt_tokens, output_tokens)
        if reason is not None:
            raise ValueError(f"request {request_id!r}: {reason}")
        old = self._requests.get(request_id)
        if old is not None and old.state.live:
            raise ValueError(f"request {request_id!r} is already queued or running")
        request = _Request(request_id, prompt_tokens, output_tokens, prefill_len=prompt_tokens)
        if self._caching and block_keys:
            request.keys = block_keys[: prompt_tokens // self.config.block_size]
        self._requests[request_id] = request
        self._waiting.append(request)
        self._decode_only_stable = False

    def abort(self, request_id: RequestId) -> bool:
        """Drop a live request (client went away); frees its blocks. False if not live."""
        r = self._requests.get(request_id)
        if r is None or not r.state.live:
            return False
        self._free(r, self._blocks_of(r))
        if r.state is DECODING:
            self._stop_decoding(r)
        elif r.state is PREFILLING:
            self._prefilling.remove(r)
            self._num_running -= 1
        else:
            self._waiting.remove(r)
        r.blocks = 0
        r.state = ABORTED
        del self._requests[request_id]
        self._decode_only_stable = False
        return True

    # ----- one iteration ----------------------------------------------------------------

    def schedule(self) -> IterationPlan:
        """Plan the next iteration: allocate its KV blocks, preempt if they run out."""
        if self._in_flight is not None:
            raise RuntimeError("schedule() called twice without commit()")
        plan = IterationPlan(self.iterations)
        self._in_flight_requests = []
        if self.config.budget_tokens is None:
            self._schedule_prefill_first(plan)
        elif self.config.decodes_beside_prefill:
            self._schedule_chunked(plan, self.config.budget_tokens)
        else:
            self._schedule_prefill_apart(plan, self.config.budget_tokens)
        self._in_flight = plan
        return plan

    def _schedule_chunked(self, plan: IterationPlan, budget: int) -> None:
        left = budget
        # 1. Decodes: one token for every running decode, before any prompt token.
        if self._decoding:
            self._reserve_decode_blocks(plan)
            left -= plan.decodes
        self._schedule_prompt_chunks(plan, left)

    def _schedule_prefill_apart(self, plan: IterationPlan, budget: int) -> None:
        # 2.-3. Prompt chunks first, the whole budget theirs, no decodes beside them (SGLang's
        # scheduler: "run prefill first if possible", get_next_batch_to_run).
        self._schedule_prompt_chunks(plan, budget)
        if plan.chunks:
            return
        # 1. No prompt chunk fits: a decode-only iteration.
        if self._decoding:
            self._reserve_decode_blocks(plan)

    def _schedule_prompt_chunks(self, plan: IterationPlan, left: int) -> None:
        pool = self.pool
        # 2. Partial prefills: the next chunk of each, in admission order; preempt the newest
        # running requests while its blocks do not fit (itself last).
        for r in list(self._prefilling):
            if left <= 0:
                break
            if r.state is not PREFILLING:  # preempted by an earlier chunk of this loop
                continue
            n = chunk_tokens(left, r.prefill_len - r.prefilled, self.config)
            if n <= 0:
                break
            need = blocks_for(r.prefilled + n, self.config.block_size) - r.blocks
            while not pool.can_allocate(need):
                if self._preempt_newest(plan) is r:
                    break
            if r.state is not PREFILLING:
                continue
            pool.allocate(need)
            r.blocks += need
            self._add_chunk(plan, r, n)
            left -= n
        # 3. Admissions, FCFS, while budget, sequence slots and KV blocks remain; none after a
        # preemption (as vLLM), since the blocks just freed belong to the preempted requests.
        if plan.preempted:
            return
        waiting = self._waiting
        seq_limit = self.config.seq_limit
        while left > 0 and waiting and self._num_running < seq_limit:
            r = waiting[0]
            hit_blocks, idle_hits = self._match(r)
            hit = hit_blocks * self.config.block_size
            n = chunk_tokens(left, r.prefill_len - hit, self.config)
            if n <= 0:
                break
            need = blocks_for(hit + n, self.config.block_size) - hit_blocks
            if not pool.can_allocate(need + idle_hits):
                break
            waiting.popleft()
            self._admit(r, need, hit_blocks)
            self._add_chunk(plan, r, n)
            left -= n

    def _schedule_prefill_first(self, plan: IterationPlan) -> None:
        # 3. Admissions first: whole prompts, FCFS, no decodes beside them (old vLLM default).
        cap = self.config.prefill_first_max_tokens
        waiting = self._waiting
        while waiting and self._num_running < self.config.seq_limit:
            r = waiting[0]
            hit_blocks, idle_hits = self._match(r)
            hit = hit_blocks * self.config.block_size
            n = r.prefill_len - hit
            if cap is not None and plan.chunks and plan.prefill_tokens + n > cap:
                break
            need = blocks_for(hit + n, self.config.block_size) - hit_blocks
            if not self.pool.can_allocate(need + idle_hits):
                break
            waiting.popleft()
            self._admit(r, need, hit_blocks)
            self._add_chunk(plan, r, n)
        if plan.chunks:
            return
        # 1. Nothing admissible: a decode-only iteration.
        if self._decoding:
            self._reserve_decode_blocks(plan)

    def _reserve_decode_blocks(self, plan: IterationPlan) -> None:
        """Blocks for the decoders whose context crosses a block boundary this tick; preempt
        the newest running requests while they do not fit. Fills plan.decodes/contexts."""
        tick = self.ticks + 1
        phase = tick % self.config.block_size
        # A preempted decoder leaves the phase count, so the need is read again each time.
        while not self.pool.can_allocate(self._phase[phase]):
            self._preempt_newest(plan)
        self.pool.allocate(self._phase[phase])
        self._alloc_tick = tick
        plan.decodes = len(self._decoding)
        plan.decode_context_tokens = self._base_sum + plan.decodes * tick

    def _match(self, r: _Request) -> tuple[int, int]:
        """(blocks, of them free) of ``r``'s prompt found in the prefix cache, leaving at least
        its last token to compute (vLLM's rule); (0, 0) without keys. Check only."""
        if not r.keys:
            return 0, 0
        pool = self.pool
        assert isinstance(pool, CachingBlockPool)  # keys are kept only with caching
        return pool.match(r.keys, (r.prefill_len - 1) // self.config.block_size)

    def _admit(self, r: _Request, blocks: int, hit_blocks: int = 0) -> None:
        """Start ``r``'s prefill: take its ``hit_blocks`` cached blocks (its prompt resumes
        after them) and ``blocks`` new ones for its first chunk."""
        r.state = PREFILLING
        pool = self.pool
        if self._caching and r.preemptions == 0:
            # vLLM counts a request's lookup once: a preempted request's second is left out.
            self.prefix_cache_queries_tokens += r.prompt
            self.prefix_cache_hits_tokens += hit_blocks * self.config.block_size
        if hit_blocks:
            assert isinstance(pool, CachingBlockPool)
            hits = r.keys[:hit_blocks]
            pool.acquire(hits)
            r.held = list(hits)
        r.prefilled = hit_blocks * self.config.block_size
        r.blocks = hit_blocks + blocks
        pool.allocate(blocks)
        self._prefilling.append(r)
        self._running_order.append(r)
        self._num_running += 1

    def _add_chunk(self, plan: IterationPlan, r: _Request, n: int) -> None:
        """Put ``n`` prompt tokens of ``r`` in the plan (plain data this scheduler fills, inline
        here because it runs once per chunk): each new token attends to the ``offset`` tokens
        already cached and to the new ones before it, n x offset + n^2 / 2 pairs."""
        offset = r.prefilled
        if r.keys:  # vLLM caches a full block when it is scheduled, before the pass runs
            self._register(r, offset, n)
        plan.chunks.append((r.rid, n, offset))
        plan.prefill_tokens += n
        plan.prefill_pairs += n * offset + n * n / 2.0
        plan.prefill_prefix_tokens += offset
        self._in_flight_requests.append(r)

    def _preempt_newest(self, plan: IterationPlan) -> _Request:
        """Preempt by recompute the most recently admitted running request (lowest FCFS
        priority): free all its blocks and put it at the head of the waiting queue."""
        order = self._running_order
        while True:
            r = order.pop()  # IndexError here would mean a request larger than the cache
            if r.state is PREFILLING or r.state is DECODING:
                break
        if r.state is DECODING:
            in_plan = self._alloc_tick == self.ticks + 1 and plan.decodes > 0
            if in_plan:  # already counted in this iteration's decodes
                plan.drop_decode(r.base + self._alloc_tick)
            r.generated += 1 + self.ticks - r.tick0
            r.segments.append((r.first_iteration, r.tick0, self.ticks - r.tick0))
            self._free(r, self._blocks_of(r))
            self._stop_decoding(r)
        else:
            self._free(r, r.blocks)
            self._prefilling.remove(r)
            self._num_running -= 1
        r.state = WAITING
        r.blocks = 0
        r.prefilled = 0
        r.prefill_len = r.prompt + r.generated  # recompute prompt and generated tokens
        r.preemptions += 1
        self.preemptions_total += 1
        self._waiting.appendleft(r)
        plan.preempted.append(r.rid)
        return r

    def commit(self, plan: IterationPlan, *, with_ids: bool = False) -> IterationOutcome:
        """Apply a planned iteration once it has run: advance prompts, emit tokens, finish."""
        if plan is not self._in_flight:
            raise RuntimeError("commit() of a plan that is not the one in flight")
        self._in_flight = None
        if self.config.prefix_cached_after_iteration and isinstance(self.pool, CachingBlockPool):
            self.pool.publish()  # what this iteration computed is matchable from the next
        chunk_requests = self._in_flight_requests
        emitted_ids: list[RequestId] | None = None
        if with_ids:
            emitted_ids = [r.rid for r in self._decoding] if plan.decodes else []
        emitted = 0
        finished: list[RequestId] = []
        if plan.decodes:
            self.ticks += 1
            emitted = len(self._decoding)
            bucket = self._finish.pop(self.ticks, None)
            if bucket is not None:
                for r in bucket:
                    if r.state is DECODING and r.finish_tick == self.ticks:
                        self._finish_decoder(r)
                        finished.append(r.rid)
        first: list[RequestId] = []
        for r, (_, n, _) in zip(chunk_requests, plan.chunks, strict=True):
            if r.state is not PREFILLING:  # aborted while the iteration ran
                continue
            r.prefilled += n
            if r.prefilled < r.prefill_len:
                continue
            # The last chunk samples a token in the same pass.
            self._prefilling.remove(r)
            first.append(r.rid)
            emitted += 1
            left = r.output - r.generated
            r.first_iteration = plan.index
            r.tick0 = self.ticks
            if left == 1:
                r.generated += 1
                r.segments.append((plan.index, self.ticks, 0))
                self._free(r, r.blocks)
                self._num_running -= 1
                self._retire(r, FINISHED)
                finished.append(r.rid)
            else:
                self._start_decoding(r, left)
        if emitted_ids is not None:
            emitted_ids.extend(first)
        self.iterations += 1
        self._alloc_tick = self.ticks  # also when every planned decoder was preempted
        # A finish frees a sequence slot and blocks, which may unblock an admission next time.
        self._decode_only_stable = (
            bool(plan.decodes) and not plan.chunks and not plan.preempted and not finished
        )
        return IterationOutcome(
            plan.index, plan.tokens, emitted, first, finished, plan.preempted, emitted_ids
        )

    # ----- decode-only fast path (the simulator's jump) ---------------------------------

    def decode_only_horizon(self) -> int:
        """Iterations ahead that are sure to be decode-only with no finish and no preemption,
        if nothing is added: the last iteration was decode-only, so admissions are blocked
        (or none wait) until a request finishes. 0 when unsure."""
        if not self._decode_only_stable or self._in_flight is not None or not self._decoding:
            return 0
        heap = self._finish_ticks
        while heap and heap[0] not in self._finish:
            heapq.heappop(heap)
        if not heap:
            return 0
        horizon = heap[0] - self.ticks - 1
        if horizon <= 0:
            return 0
        # Every block_size ticks each decoder takes exactly one new block.
        decoders = len(self._decoding)
        bs = self.config.block_size
        free = self.pool.free
        cycles = free // decoders
        k = cycles * bs
        free -= cycles * decoders
        for step in range(1, bs):
            free -= self._phase[(self.ticks + step) % bs]
            if free < 0:
                break
            k += 1
        return max(0, min(horizon, k))

    def advance_decode_only(self, iterations: int) -> None:
        """Commit ``iterations`` decode-only iterations at once (at most the horizon)."""
        if iterations <= 0:
            return
        if iterations > self.decode_only_horizon():
            raise RuntimeError("advance_decode_only beyond the decode-only horizon")
        bs = self.config.block_size
        decoders = len(self._decoding)
        need = (iterations // bs) * decoders
        for step in range(1, iterations % bs + 1):
            need += self._phase[(self.ticks + step) % bs]
        self.pool.allocate(need)
        self.ticks += iterations
        self.iterations += iterations
        self._alloc_tick = self.ticks

    # ----- bookkeeping ------------------------------------------------------------------

    def _start_decoding(self, r: _Request, left: int) -> None:
        r.state = DECODING
        r.base = r.prefill_len - self.ticks
        r.finish_tick = self.ticks + left - 1
        self._decoding[r] = None
        self._base_sum += r.base
        self._phase[(1 - r.base) % self.config.block_size] += 1
        bucket = self._finish.get(r.finish_tick)
        if bucket is None:
            self._finish[r.finish_tick] = [r]
            heapq.heappush(self._finish_ticks, r.finish_tick)
        else:
            bucket.append(r)

    def _stop_decoding(self, r: _Request) -> None:
        del self._decoding[r]
        self._base_sum -= r.base
        self._phase[(1 - r.base) % self.config.block_size] -= 1
        self._num_running -= 1

    def _finish_decoder(self, r: _Request) -> None:
        r.generated += 1 + self.ticks - r.tick0
        r.segments.append((r.first_iteration, r.tick0, self.ticks - r.tick0))
        self._free(r, self._blocks_of(r))
        self._stop_decoding(r)
        self._retire(r, FINISHED)

    def _retire(self, r: _Request, state: RequestState) -> None:
        r.state = state
        r.blocks = 0
        if not self._keep_finished:
            del self._requests[r.rid]
        if len(self._running_order) > 2 * self._num_running + 64:
            self._compact_running_order()

    def _compact_running_order(self) -> None:
        seen: set[int] = set()
        kept: list[_Request] = []
        for r in reversed(self._running_order):
            if (r.state is PREFILLING or r.state is DECODING) and id(r) not in seen:
                seen.add(id(r))
                kept.append(r)
        kept.reverse()
        self._running_order = kept

    def _register(self, r: _Request, offset: int, n: int) -> None:
        """Cache the keyed blocks that the chunk [offset, offset + n) completes."""
        pool = self.pool
        assert isinstance(pool, CachingBlockPool)  # keys are kept only with caching
        bs = self.config.block_size
        for j in range(offset // bs, min((offset + n) // bs, len(r.keys))):
            key = r.keys[j]
            if pool.register(key, pending=self.config.prefix_cached_after_iteration):
                r.held.append(key)

    def _free(self, r: _Request, blocks: int) -> None:
        """Give back all ``blocks`` that ``r`` holds: its own, then its keyed ones last first
        (vLLM frees a request's blocks in reverse, so a prefix's tail is evicted first)."""
        held = r.held
        if not held:
            self.pool.release(blocks)
            return
        pool = self.pool
        assert isinstance(pool, CachingBlockPool)
        pool.release(blocks - len(held))
        pool.release_keys(reversed(held))
        r.held = []

    def _blocks_of(self, r: _Request) -> int:
        if r.state is DECODING:
            return blocks_for(r.base + self._alloc_tick, self.config.block_size)
        return r.blocks
