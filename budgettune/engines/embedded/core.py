"""The embedded engine's real-time core: the simulator's scheduler and step-time model run one
iteration at a time on the wall clock, each lasting its modeled step time, and every token a
request produced is written to its HTTP stream as an OpenAI SSE chunk at the iteration's end.

Timing: an iteration starts where the previous one was due to end (small lateness is absorbed,
so errors do not accumulate) and is waited out with :func:`load.timing.sleep_until` (sleep until
1.5 ms before, then yield until the deadline). The lateness of every iteration end is kept in
``budgettune:iteration_lateness_seconds`` and summarised on shutdown. Measured on the shared
2-core dev machine (benchmarks/bench_loadgen.py, 100 streams, ~28 ms steps): p50 0.001 ms, p99
0.6-2.4 ms, max ~3.5 ms at load average 1.5; under heavy load (5-7) p99 5-10 ms with stalls of
hundreds of ms, which ``replay`` reports and warns about.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import IO

import numpy as np

from budgettune.core.clock import sleep_until
from budgettune.engines.embedded.http11 import Exchange
from budgettune.engines.embedded.prefix_keys import block_keys
from budgettune.engines.embedded.wire import DONE_EVENT, Endpoint, Usage, Wire
from budgettune.engines.prometheus import EngineMetrics, Histogram
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import Scheduler

# Lateness under this is absorbed by starting the next iteration at the ideal time; beyond it
# (the process was descheduled) the timeline restarts from now instead of bunching iterations.
CATCH_UP_S = 0.005
LATENESS_BUCKETS_S = (
    0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.05,
)  # fmt: skip
TOKEN_TEXT = b" tok"
MAX_UNREAD_BYTES = 16 * 2**20  # a stream the client stopped reading is aborted beyond this
LATENESS_SAMPLES_KEPT = 200_000  # the last iterations, for the shutdown summary


@dataclass(slots=True, eq=False)
class LiveRequest:
    """One request being served: its stream, what it asked for, and its progress."""

    rid: int
    exchange: Exchange
    endpoint: Endpoint
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    arrival_s: float
    content: tuple[int, ...] | bytes = b""  # its prompt: ids, or text's bytes (cache keys)
    wire: Wire | None = None  # its answer's bytes, set on submit
    emitted: int = 0
    pending: int = 0  # tokens produced but not yet written (stream interval > 1)
    first_token_s: float = 0.0
    last_token_s: float = 0.0
    scheduled: bool = False
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class SimCore:
    """Owns the scheduler and the clock loop. ``submit`` queues a request (the HTTP handler then
    awaits ``request.done``); ``run`` is the loop task."""

    def __init__(
        self,
        scheduler: Scheduler,
        step_model: StepModel,
        metrics: EngineMetrics,
        *,
        model_name: str,
        time_scale: float = 1.0,
        stream_interval: int = 1,
        emission_log: IO[str] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.step_model = step_model
        self.metrics = metrics
        self.model_name = model_name
        self.time_scale = time_scale
        self.stream_interval = stream_interval
        self.emission_log = emission_log
        self.lateness = Histogram(
            "budgettune:iteration_lateness_seconds",
            "How late the sim engine ended iterations against their modeled end.",
            LATENESS_BUCKETS_S,
        )
        self.lateness_samples: deque[float] = deque(maxlen=LATENESS_SAMPLES_KEPT)
        self._live: dict[Hashable, LiveRequest] = {}
        self._next_id = 0
        self._wake = asyncio.Event()
        self._created = int(time.time())

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def submit(self, request: LiveRequest) -> None:
        """Queue a validated request (``scheduler.rejection`` already checked)."""
        request.wire = Wire(request.endpoint, request.rid, self._created, self.model_name)
        config = self.scheduler.config
        keys = block_keys(request.content, config.block_size) if config.prefix_caching else ()
        self.scheduler.add(request.rid, request.prompt_tokens, request.max_tokens, keys)
        self._live[request.rid] = request
        self.metrics.waiting = self.scheduler.num_waiting
        self._wake.set()

    def abort(self, request: LiveRequest) -> None:
        """The client went away: drop the request from the scheduler and release its handler."""
        if self._live.pop(request.rid, None) is not None:
            self.scheduler.abort(request.rid)
            self.metrics.success_by_reason["abort"] = (
                self.metrics.success_by_reason.get("abort", 0) + 1
            )
        if not request.done.done():
            request.done.set_result(None)

    async def run(self) -> None:
        """Iterate forever: plan, wait the modeled step time, commit, write tokens."""
        scheduler = self.scheduler
        ideal_end: float | None = None
        while True:
            if not scheduler.has_work:
                ideal_end = None
                self._wake.clear()
                await self._wake.wait()
                continue
            now = time.monotonic()
            start = ideal_end if ideal_end is not None and now - ideal_end <= CATCH_UP_S else now
            plan = scheduler.schedule()
            if plan.empty:  # nothing admissible right now (cannot last: nothing runs either)
                scheduler.commit(plan)
                ideal_end = None
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.001):
                        await self._wake.wait()
                continue
            for rid, _, _ in plan.chunks:  # a first chunk after cache hits starts past 0
                request = self._live.get(rid)
                if request is not None and not request.scheduled:
                    request.scheduled = True
                    self.metrics.queue.observe(max(0.0, start - request.arrival_s))
            step_s = plan.step_time_s(self.step_model) * self.time_scale
            ideal_end = start + step_s
            late_s = await sleep_until(ideal_end)
            self.lateness.observe(late_s)
            self.lateness_samples.append(late_s)
            outcome = scheduler.commit(plan, with_ids=True)
            # Metrics use when the tokens really left (the modeled end plus the loop's lateness).
            emitted_s = ideal_end + late_s
            self.metrics.iteration_tokens.observe(plan.tokens)
            self.metrics.preemptions += len(outcome.preempted_ids)
            self.metrics.prefix_cache_queries = scheduler.prefix_cache_queries_tokens
            self.metrics.prefix_cache_hits = scheduler.prefix_cache_hits_tokens
            finished = set(outcome.finished_ids)
            for rid in outcome.emitted_ids or ():
                request = self._live.get(rid)
                if request is not None:
                    self._emit(request, emitted_s, rid in finished)
            self.metrics.running = scheduler.num_running
            self.metrics.waiting = scheduler.num_waiting

    def _emit(self, request: LiveRequest, produced_s: float, last: bool) -> None:
        """One more token of ``request`` was produced at ``produced_s``: record it and write it
        (now, or at the next stream interval), and finish the request after its last token."""
        metrics = self.metrics
        request.emitted += 1
        request.pending += 1
        metrics.generation_tokens += 1
        if request.emitted == 1:
            # vLLM counts a prompt's tokens once, cached ones too, when its first token is out.
            metrics.prompt_tokens += request.prompt_tokens
            request.first_token_s = produced_s
            metrics.ttft.observe(produced_s - request.arrival_s)
        else:
            metrics.observe_gap(produced_s - request.last_token_s)
        request.last_token_s = produced_s
        exchange = request.exchange
        if (
            exchange.client_gone or exchange.unsent_bytes > MAX_UNREAD_BYTES
        ):  # the client hung up, or stopped reading
            self.abort(request)
            return
        if request.stream and (
            last or request.emitted == 1 or request.pending >= self.stream_interval
        ):
            self._write_tokens(request, last)
        if last:
            if not request.stream:
                exchange.respond(200, self.final_body(request))
            metrics.success_by_reason["length"] = metrics.success_by_reason.get("length", 0) + 1
            metrics.e2e.observe(produced_s - request.arrival_s)
            self._live.pop(request.rid, None)
            request.done.set_result(None)

    def _write_tokens(self, request: LiveRequest, last: bool) -> None:
        """Write the tokens produced since the last write as one SSE event (the first also gets
        the chat role event before it, the last the usage event and [DONE] after it)."""
        wire = request.wire
        assert wire is not None  # set on submit
        k = request.pending
        request.pending = 0
        # Usage objects only when sent: this runs for every stream at every iteration.
        continuous = (
            Usage(request.prompt_tokens, request.emitted) if request.continuous_usage else None
        )
        events: list[bytes] = []
        if request.emitted == k:  # nothing written before this
            opening_usage = Usage(request.prompt_tokens, 0) if request.continuous_usage else None
            events += wire.opening(opening_usage)
        events.append(wire.tokens(TOKEN_TEXT * k, last=last, usage=continuous))
        if last:
            if request.include_usage:
                events.append(wire.usage_event(Usage(request.prompt_tokens, request.emitted)))
            events.append(DONE_EVENT)
        request.exchange.send_chunks(events, end=last)
        if self.emission_log is not None:
            self.emission_log.write(f"{request.rid},{k},{time.monotonic():.7f}\n")

    def final_body(self, request: LiveRequest) -> bytes:
        """The JSON body of a finished request's non-streamed answer."""
        assert request.wire is not None  # set on submit
        usage = Usage(request.prompt_tokens, request.emitted)
        return request.wire.whole(TOKEN_TEXT * request.emitted, usage)

    def lateness_summary(self) -> str:
        """One line on the loop's timing error (iteration end minus modeled end)."""
        samples = np.asarray(self.lateness_samples)
        if not len(samples):
            return "iterations: 0"
        p50, p99 = np.percentile(samples, [50, 99]) * 1e3
        return (
            f"iterations: {len(samples)}, lateness p50 {p50:.3f} ms, p99 {p99:.3f} ms, "
            f"max {samples.max() * 1e3:.3f} ms"
        )
