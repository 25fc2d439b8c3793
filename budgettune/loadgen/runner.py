"""Replay a :class:`~budgettune.trace.schedule.Schedule` against an OpenAI-compatible server:
send each request at its target time (open loop), or keep N requests in flight (closed loop,
``concurrency``), collect per-chunk timings, turn them into per-token records, stop early on
demand (error rate, a caller's verdict, Ctrl-C, a refused API key), and self-check the load
generator (achieved rate, send lag, merged chunks).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from budgettune.core.auth import bearer_headers
from budgettune.core.clock import sleep_until
from budgettune.core.errors import BudgettuneError, SpecError, UserError, shorten
from budgettune.core.records import RequestRecord
from budgettune.core.units import finite_or_none
from budgettune.loadgen.client import (
    Endpoint,
    StreamResult,
    completion_request,
    request_body,
    stream_completion,
)
from budgettune.loadgen.machine_speed import settled_reference_ms
from budgettune.loadgen.selfcheck import LagStats, SelfCheck
from budgettune.loadgen.server_metrics import ServerSnapshot, scrape, wait_until_idle
from budgettune.loadgen.stop import Stop, StopReason
from budgettune.loadgen.text_prompts import text_prompts
from budgettune.loadgen.transport import SEND_AT, SendTime, async_client
from budgettune.trace.schedule import Schedule

MERGED_MODES = ("spread", "first")
MERGED_WARN_SHARE = 0.01
START_LEAD_S = 0.05  # the first target lies this far after start, so it is not late by setup
# A request's send starts this long before its target; httpx's share (the pool, a new
# connection, serialising) is done by then and the bytes wait at the socket until due. 4 ms was
# too short for a replay's first sends (new connections, cold code): 60 sim requests at 7/s had
# send lag p99 7.3-9.7 ms, always from the first few requests, and were flagged busy; with 30 ms,
# 3.0 ms and under. bench_loadgen B (pinned), alternated: p99 14.7 and 9.6 ms at 4 ms against 4.6
# and 3.7 ms at 30 ms (README: How the numbers are counted).
PREPARE_LEAD_S = 0.030
PREFIX_SEED_SALT = 1_000_003
TREE_SEED_SALT = 1_000_033  # shared blocks of a prefix tree (Mooncake hash_ids)
# Idle connections are dropped well before vLLM's (uvicorn's) 5 s keep-alive timeout: reusing one
# just as the server closes it fails the request ("Server disconnected without sending a
# response"), seen in the real-vLLM tests with requests 3 s apart.
KEEPALIVE_EXPIRY_S = 2.0
IDLE_WAIT_S = 30.0  # after an early stop: how long the engine may take to drop what was cancelled

UNAUTHORIZED = 401
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True, frozen=True)
class Target:
    """Where to send: the server's base URL (no /v1), the model id requests must name, and the
    API key it demands (sent as ``Authorization: Bearer KEY``; None: no header)."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    metrics_path: str = "/metrics"  # the server's Prometheus text, scraped before and after


@dataclass(slots=True, frozen=True)
class RunOptions:
    """How to replay. token ids are drawn uniformly from [token_id_low, token_id_high): small ids
    exist in every vocabulary. max_error_rate aborts once at least ``min_finished_for_abort``
    requests finished and the failed share exceeds it. warmup_requests marks the first requests
    (in schedule order) so summaries can leave them out. endpoint: completions (token-id
    prompts) or chat. concurrency N: closed loop, N requests in flight and the next sent when
    one finishes, the schedule's arrival times unused (None: open loop, each at its time).
    continuous_usage asks the server for usage in every chunk (off: it adds server work;
    tokens are counted from the stream and checked against the final usage)."""

    merged_chunks: str = "spread"
    max_error_rate: float | None = None
    min_finished_for_abort: int = 10
    request_timeout_s: float = 300.0
    connect_timeout_s: float = 10.0
    seed: int = 0
    token_id_low: int = 10
    token_id_high: int = 250
    warmup_requests: int = 0
    stream_usage: bool = True
    scrape_metrics: bool = True
    endpoint: Endpoint = Endpoint.COMPLETIONS
    concurrency: int | None = None
    continuous_usage: bool = False
    tokenizer: str | None = None  # a tokenizer.json: completions prompts sent as its text
    # Mixed into every prompt's ids, so that no two runs send the same content and an engine's
    # prefix cache is hit only where one run's own requests share a prefix (a re-measure on the
    # same engine finds nothing of the replay before it). None: run_schedule draws a fresh one.
    content_salt: int | None = None

    @property
    def prompt_form(self) -> str:
        """What the prompts are sent as: ``text`` (chat messages, or completions prompts made
        with ``tokenizer``) or ``ids`` (completions prompts as token ids)."""
        return "text" if self.endpoint is Endpoint.CHAT or self.tokenizer else "ids"

    def __post_init__(self) -> None:
        if self.merged_chunks not in MERGED_MODES:
            raise SpecError(
                f"unknown mode {self.merged_chunks!r}; use spread or first", field="merged_chunks"
            )
        if self.max_error_rate is not None and not 0 <= self.max_error_rate <= 1:
            raise SpecError(
                f"must be within 0-1, got {self.max_error_rate!r}", field="max_error_rate"
            )
        if not 0 < self.token_id_low < self.token_id_high:
            raise SpecError("token id range must satisfy 0 < low < high")
        if self.warmup_requests < 0:
            raise SpecError(f"must be zero or more, got {self.warmup_requests}", field="warmup")
        if self.concurrency is not None and self.concurrency < 1:
            raise SpecError(f"must be 1 or more, got {self.concurrency}", field="concurrency")


@dataclass(slots=True, repr=False)
class LiveRecord:
    """A measured request: the shared :class:`RequestRecord` plus the raw wire facts."""

    record: RequestRecord
    http_status: int | None
    chunk_times_s: FloatArray
    chunk_tokens: IntArray
    usage: dict[str, object] | None = None
    warmup: bool = False
    cancelled: bool = False  # cancelled by the caller (an early stop, Ctrl-C): not a failure
    finished_s: float | None = None  # when its stream ended (last bytes, or the failure seen)

    def __repr__(self) -> str:
        # Short on purpose: asyncio formats the main task's result (with every record) when
        # it restores the SIGINT handler, and numpy arrays of tokens make that take seconds.
        r = self.record
        return f"LiveRecord(id={r.request_id}, tokens={len(r.token_times_s)}, error={r.error!r})"

    def to_json(self) -> dict[str, object]:
        """Record fields plus wire facts; per-chunk arrays only when some chunk was merged (else
        they equal token_times_s and ones)."""
        data = self.record.to_json()
        data.update(http_status=self.http_status, usage=self.usage, warmup=self.warmup)
        if self.finished_s is not None:
            data["finished_s"] = round(self.finished_s, 7)
        if self.cancelled:  # written only when true: every other record keeps its keys
            data["cancelled"] = True
        if self.record.merged_chunks:
            data["chunk_times_s"] = [round(float(t), 7) for t in self.chunk_times_s]
            data["chunk_tokens"] = [int(k) for k in self.chunk_tokens]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LiveRecord:
        record = RequestRecord.from_json(data)
        if "chunk_times_s" in data:
            chunk_times = np.asarray(data["chunk_times_s"], dtype=np.float64)
            chunk_tokens = np.asarray(data["chunk_tokens"], dtype=np.int64)
        else:
            chunk_times = record.token_times_s.copy()
            chunk_tokens = np.ones(len(chunk_times), dtype=np.int64)
        return cls(
            record=record,
            http_status=data.get("http_status"),
            chunk_times_s=chunk_times,
            chunk_tokens=chunk_tokens,
            usage=data.get("usage"),
            warmup=bool(data.get("warmup", False)),
            cancelled=bool(data.get("cancelled", _legacy_cancelled(record))),
            finished_s=None if data.get("finished_s") is None else float(data["finished_s"]),
        )


def _legacy_cancelled(record: RequestRecord) -> bool:
    """Whether a record written before the ``cancelled`` field was cancelled: the client's own
    error text said so ("cancelled after N tokens"). Read here only, at the file boundary."""
    return (record.error or "").startswith("cancelled")


@dataclass(slots=True, frozen=True)
class RunProgress:
    sent: int
    finished: int
    failed: int
    total: int
    elapsed_s: float


# Called after every finished request with all records so far; a Stop ends the run with it.
StopRule = Callable[[Sequence[LiveRecord]], Stop | None]


@dataclass(slots=True, repr=False)
class RunOutcome:
    """What a replay produced. ``records`` are the sent requests, in schedule order."""

    records: list[LiveRecord]
    scheduled: int
    target_rate_per_s: float
    duration_s: float
    complete: bool
    stop_reason: str | None = None  # the sentence (results.json's incomplete_reason)
    stopped_by: StopReason | None = None  # the same, as a field
    merged_chunks_mode: str = "spread"
    concurrency: int | None = None  # closed loop with this many in flight (None: open loop)
    client_cpu_share: float | None = None  # this process's CPU time over the run / its wall
    # machine_speed.reference_ms just before the first send and after the last response (None:
    # not taken, e.g. an interrupted run has no after)
    machine_ref_before_ms: float | None = None
    machine_ref_after_ms: float | None = None
    continuous_usage: bool = False  # chunks carried usage: a merged chunk's tokens were known
    server_before: ServerSnapshot | None = None
    server_after: ServerSnapshot | None = None
    # Per sent request (schedule order), how late the timer that released its bytes woke: the
    # machine's share of the send lag (the rest is the write itself).
    wake_late_s: FloatArray = field(default_factory=lambda: np.empty(0))
    prompt_form: str = "ids"  # RunOptions.prompt_form: what the prompts were sent as
    endpoint: Endpoint = Endpoint.COMPLETIONS
    content_salt: int = 0  # RunOptions.content_salt as the run drew it

    def __repr__(self) -> str:  # short: see LiveRecord.__repr__
        return (
            f"RunOutcome({len(self.records)} of {self.scheduled} records, "
            f"complete={self.complete}, stop_reason={self.stop_reason!r})"
        )

    def measured(self) -> list[RequestRecord]:
        """Records after warm-up: the ones statistics are computed over."""
        return [live.record for live in self.records if not live.warmup]

    def selfcheck(self) -> SelfCheck:
        """The load generator's own accuracy: achieved vs target rate; send lag (request on the
        socket - target) and, within it, the timer's own lateness (the machine's share);
        merged chunks."""
        sent = np.array([live.record.sent_s for live in self.records])
        targets = np.array([live.record.target_s for live in self.records])
        lag_ms = (sent - targets) * 1e3
        achieved = float("nan")
        if len(sent) >= 2 and sent[-1] > sent[0]:
            achieved = (len(sent) - 1) / float(sent[-1] - sent[0])
        chunks = int(sum(len(live.chunk_tokens) for live in self.records))
        merged = int(sum(live.record.merged_chunks for live in self.records))
        share = merged / chunks if chunks else 0.0
        wake_ms = self.wake_late_s[: len(lag_ms)] * 1e3
        wake_ms = wake_ms[np.isfinite(wake_ms)]  # requests never written have no release time
        checked, off = self._prompt_tokens_counted()
        return SelfCheck(
            scheduled=self.scheduled,
            sent=len(self.records),
            target_rate_per_s=finite_or_none(self.target_rate_per_s, digits=4),
            achieved_rate_per_s=finite_or_none(achieved, digits=4),
            send_lag=_lag_stats(lag_ms),
            timer_lateness=_lag_stats(wake_ms),
            chunks=chunks,
            merged_chunks=merged,
            merged_chunk_share=round(share, 6),
            merged_chunks_mode=self.merged_chunks_mode,
            merged_chunks_warning=share > MERGED_WARN_SHARE,
            complete=self.complete,
            stop_reason=self.stop_reason,
            duration_s=round(self.duration_s, 4),
            concurrency=self.concurrency,
            client_cpu_share=finite_or_none(self.client_cpu_share, digits=3),
            machine_ref_before_ms=self.machine_ref_before_ms,
            machine_ref_after_ms=self.machine_ref_after_ms,
            prompt_form=self.prompt_form,
            content_salt=self.content_salt,
            prompt_tokens_checked=checked,
            prompt_tokens_off=off,
        )

    def _prompt_tokens_counted(self) -> tuple[int, int]:
        """Of the completions requests whose server reported ``usage.prompt_tokens``, how many
        there were and how many it counted otherwise than scheduled: the server's own word that
        the prompts were as long as asked (a chat template adds its own tokens: not checked)."""
        checked = off = 0
        if self.endpoint is Endpoint.CHAT:
            return checked, off
        for live in self.records:
            counted = (live.usage or {}).get("prompt_tokens")
            if not isinstance(counted, int):
                continue
            checked += 1
            off += counted != live.record.prompt_tokens
        return checked, off


def _lag_stats(values_ms: FloatArray) -> LagStats:
    """p50, p99 and max (ms, 4 decimals) of the values; None each when there are none."""
    if not len(values_ms):
        return LagStats()
    p50, p99 = np.percentile(values_ms, [50, 99])
    return LagStats(round(float(p50), 4), round(float(p99), 4), round(float(values_ms.max()), 4))


def token_times_s(chunk_times_s: FloatArray, chunk_tokens: IntArray, mode: str) -> FloatArray:
    """One time per output token from per-chunk arrivals.

    ``first``: a chunk of k tokens puts all k at its arrival (one real gap, k - 1 zero gaps).
    ``spread``: the gap since the previous chunk is divided evenly over the k tokens. The tokens
    of the first chunk all arrive with it (there is no earlier token to spread from).
    """
    counts = np.asarray(chunk_tokens, dtype=np.int64)
    times = np.asarray(chunk_times_s, dtype=np.float64)
    at_arrival = np.repeat(times, counts)
    if mode == "first" or len(times) == 0 or not np.any(counts > 1):
        return at_arrival
    previous = np.concatenate((times[:1], times[:-1]))
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    position = np.arange(int(counts.sum())) - starts + 1  # 1..k within each chunk
    per_token = np.repeat(counts, counts)
    prev_rep = np.repeat(previous, counts)
    return prev_rep + (at_arrival - prev_rep) * position / per_token


def prompt_ids(schedule: Schedule, index: int, options: RunOptions) -> list[int]:
    """Exactly ``prompt_tokens[index]`` random ids, seeded per request and run (the run's
    ``content_salt``, 0 when None); requests of one prefix group share their first
    ``prefix_tokens`` ids (and nothing else, by construction)."""
    length = int(schedule.prompt_tokens[index])
    low, high = options.token_id_low, options.token_id_high
    salt = options.content_salt or 0
    rng = np.random.default_rng([options.seed, salt, index])
    prefix: list[int] = []
    blocks = schedule.shared_blocks
    if blocks is not None:
        # Exact shared blocks: each tree node's tokens drawn once per run, the same wherever
        # the node appears (it stands for the blocks before it too), the last cut at the prompt.
        for node in blocks.of(index).tolist():
            node_rng = np.random.default_rng([options.seed, salt, TREE_SEED_SALT, node])
            prefix += node_rng.integers(low, high, size=blocks.block_tokens).tolist()
        prefix = prefix[:length]
    elif schedule.prefix_group is not None and schedule.prefix_tokens is not None:
        group = int(schedule.prefix_group[index])
        if group >= 0:
            shared = min(int(schedule.prefix_tokens[index]), length)
            group_rng = np.random.default_rng([options.seed, salt, PREFIX_SEED_SALT, group])
            prefix = group_rng.integers(low, high, size=shared).tolist()
    rest = rng.integers(low, high, size=length - len(prefix)).tolist()
    return prefix + rest


def prompts_as_text(schedule: Schedule, options: RunOptions) -> list[str] | None:
    """Every completions prompt as text of exactly its scheduled tokens on
    ``options.tokenizer``, made before the run starts (encoding is not free); None when the
    prompts go as ids (no tokenizer, or the chat API, whose messages are text already)."""
    if options.tokenizer is None or options.endpoint is Endpoint.CHAT:
        return None
    ids = [prompt_ids(schedule, index, options) for index in range(len(schedule))]
    return text_prompts(options.tokenizer).texts(ids)


def error_rate_rule(max_error_rate: float, min_finished: int) -> StopRule:
    """Stop when, after ``min_finished`` finished requests, the failed share exceeds the limit."""

    def rule(records: Sequence[LiveRecord]) -> Stop | None:
        if len(records) < min_finished:
            return None
        failed = sum(1 for live in records if not live.record.ok)
        share = failed / len(records)
        if share > max_error_rate:
            return Stop(
                StopReason.ERROR_RATE,
                f"aborted: {failed} of {len(records)} finished requests failed "
                f"({share:.0%} > --max-error-rate {max_error_rate:.0%})",
            )
        return None

    return rule


def _late_s(send_at: SendTime) -> float:
    """The release timer's lateness; NaN for a request never written (no connection)."""
    return math.nan if send_at.late_s is None else send_at.late_s


def _to_live(
    index: int,
    schedule: Schedule,
    result: StreamResult,
    start_ns: int,
    options: RunOptions,
    target_s: float,
) -> LiveRecord:
    chunk_s = (np.asarray(result.chunk_ns, dtype=np.int64) - start_ns) / 1e9
    chunk_tokens = np.asarray(result.chunk_tokens, dtype=np.int64)
    record = RequestRecord(
        request_id=index,
        prompt_tokens=int(schedule.prompt_tokens[index]),
        output_tokens=int(schedule.output_tokens[index]),
        target_s=target_s,
        sent_s=(result.sent_ns - start_ns) / 1e9,
        token_times_s=token_times_s(chunk_s, chunk_tokens, options.merged_chunks),
        error=result.error,
        merged_chunks=int(np.count_nonzero(chunk_tokens > 1)),
    )
    return LiveRecord(
        record=record,
        http_status=result.http_status,
        chunk_times_s=chunk_s,
        chunk_tokens=chunk_tokens,
        usage=result.usage,
        warmup=index < options.warmup_requests,
        cancelled=result.cancelled,
        finished_s=None if result.finished_ns is None else (result.finished_ns - start_ns) / 1e9,
    )


def load_generator_failed(error: BaseException) -> BudgettuneError:
    """The error a replay ends with when one of its own tasks failed: budgettune's own errors as
    they are, anything else named by its type and message (a MemoryError has none)."""
    if isinstance(error, BudgettuneError):
        return error
    what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return BudgettuneError(f"the load generator failed: {shorten(what, 300)}")


async def run_schedule(
    schedule: Schedule,
    target: Target,
    options: RunOptions,
    *,
    on_progress: Callable[[RunProgress], None] | None = None,
    stop_rule: StopRule | None = None,
) -> RunOutcome:
    """Send every request of ``schedule`` at its target time (or, with ``options.concurrency``,
    as soon as one of that many slots is free) and collect the records.

    Times in the records are seconds from the run start (target 0 = start + 50 ms lead; in a
    closed loop a request's target is when its slot freed). Stops early when
    ``options.max_error_rate`` or ``stop_rule`` says so, or when this task is cancelled
    (Ctrl-C): in-flight requests are then cancelled and recorded as failed, unsent ones are
    left out, and the outcome is marked incomplete. Never raises for failed requests, except
    that a 401 (the server wants another API key) stops the run and raises UserError (field
    ``api_key``).
    """
    if options.content_salt is None:
        options = replace(options, content_salt=secrets.randbits(63))
    rules: list[StopRule] = [stop_rule] if stop_rule else []
    if options.max_error_rate is not None:
        rules.insert(0, error_rate_rule(options.max_error_rate, options.min_finished_for_abort))
    url = f"{target.base_url.rstrip('/')}{options.endpoint.path}"
    limits = httpx.Limits(
        max_connections=None, max_keepalive_connections=None, keepalive_expiry=KEEPALIVE_EXPIRY_S
    )
    timeout = httpx.Timeout(options.request_timeout_s, connect=options.connect_timeout_s)
    n = len(schedule)
    offsets_s = schedule.target_s - (schedule.target_s[0] if n else 0.0)
    finished: dict[int, LiveRecord] = {}
    in_flight: dict[int, asyncio.Task[StreamResult]] = {}
    stop: Stop | None = None
    stopped = asyncio.Event()
    failed = 0
    send_times: dict[int, SendTime] = {}
    closed_loop = options.concurrency is not None
    slots = asyncio.Semaphore(options.concurrency or 1)  # closed loop only
    unauthorized: str | None = None
    texts = prompts_as_text(schedule, options)

    async with async_client(
        target.base_url, limits=limits, timeout=timeout, headers=bearer_headers(target.api_key)
    ) as client:
        before = (
            await scrape(client, target.base_url, target.metrics_path)
            if options.scrape_metrics
            else None
        )
        ref_before_ms = settled_reference_ms()  # nothing sent yet: the engine is idle too
        start_ns = time.monotonic_ns() + int(START_LEAD_S * 1e9)
        start_s = start_ns / 1e9
        last_done_s = start_s
        cpu_started_s = time.process_time()

        def report() -> None:
            if on_progress is not None:
                on_progress(
                    RunProgress(
                        len(in_flight) + len(finished), len(finished), failed, n,
                        time.monotonic() - start_s,
                    )
                )  # fmt: skip

        # The first failure of a background task (the sender, or a done callback): it ends the
        # run at once. Unread, it would leave the run waiting on `stopped` forever.
        broken: list[BaseException] = []

        def fail(error: BaseException) -> None:
            if not broken:
                broken.append(error)
            stopped.set()

        def on_done(index: int, task: asyncio.Task[StreamResult]) -> None:
            try:
                record_done(index, task)
            except Exception as error:  # ends the run with it, below
                fail(error)

        def on_sender_done(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None:
                fail(task.exception())  # type: ignore[arg-type]

        def record_done(index: int, task: asyncio.Task[StreamResult]) -> None:
            nonlocal failed, stop, last_done_s, unauthorized
            in_flight.pop(index, None)
            if closed_loop:
                slots.release()
            held = send_times[index].late_s is None
            if held and (task.cancelled() or task.result().cancelled):
                # Stopped while it waited out its lead time (a task cancelled before it began
                # included): its bytes never left, so it was not sent, like the requests after it.
                report()
                return
            result = task.result()
            target_s = (
                (send_times[index].due_ns - start_ns) / 1e9  # when its slot freed
                if closed_loop
                else float(offsets_s[index])
            )
            live = _to_live(index, schedule, result, start_ns, options, target_s)
            finished[index] = live
            failed += not live.record.ok
            last_done_s = time.monotonic()
            report()
            if result.http_status == UNAUTHORIZED and unauthorized is None:
                unauthorized = result.error or "http 401"
                stopped.set()
            if stop is None:
                done = list(finished.values())
                for rule in rules:
                    decision = rule(done)
                    if decision is not None:
                        stop = decision
                        stopped.set()
                        break
            if not in_flight and len(finished) == n:
                stopped.set()

        async def send_all() -> None:
            for index in range(n):
                request = completion_request(
                    client,
                    url,
                    request_body(
                        options.endpoint,
                        target.model,
                        prompt_ids(schedule, index, options) if texts is None else texts[index],
                        int(schedule.output_tokens[index]),
                        stream_usage=options.stream_usage,
                        continuous_usage=options.continuous_usage,
                    ),
                )
                if closed_loop:  # sent as soon as a slot is free (from the start, at the most)
                    await sleep_until(start_s)
                    await slots.acquire()
                    due_ns = max(time.monotonic_ns(), start_ns)
                else:
                    due_ns = start_ns + int(float(offsets_s[index]) * 1e9)
                    await sleep_until(due_ns / 1e9 - PREPARE_LEAD_S)
                if stopped.is_set():
                    return
                # Started early, held at its socket until due_ns (transport.SEND_AT).
                send_times[index] = send_at = SendTime(due_ns)
                context = contextvars.copy_context()
                context.run(SEND_AT.set, send_at)
                task = asyncio.create_task(
                    stream_completion(client, request, int(schedule.output_tokens[index])),
                    context=context,
                )
                in_flight[index] = task
                task.add_done_callback(functools.partial(on_done, index))
                report()

        sender = asyncio.create_task(send_all())
        sender.add_done_callback(on_sender_done)
        interrupted = False
        try:
            if n:
                await stopped.wait()
        except asyncio.CancelledError:
            interrupted = True
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()  # we handle Ctrl-C here and still return the partial run
            stop = stop or Stop(StopReason.INTERRUPTED, "interrupted (Ctrl-C): partial results")
        finally:
            sender.cancel()
            for task in list(in_flight.values()):
                task.cancel()
            await asyncio.gather(sender, *in_flight.values(), return_exceptions=True)
            await asyncio.sleep(0)  # let the done callbacks record the cancelled requests
        if broken:
            raise load_generator_failed(broken[0])
        if unauthorized is not None:
            raise UserError(
                f"the server refused the requests ({unauthorized})",
                field="api_key",
                hint="give the key the server expects (vllm serve --api-key) with --api-key, or "
                "in VLLM_API_KEY or OPENAI_API_KEY",
            )
        cpu_s, wall_s = time.process_time() - cpu_started_s, time.monotonic() - start_s
        after = None
        if stop is not None and not interrupted and options.scrape_metrics:
            # Cancelled requests may still be executing: the readings below wait for them.
            await wait_until_idle(client, target.base_url, target.metrics_path, IDLE_WAIT_S)
        if options.scrape_metrics and not interrupted:
            after = await scrape(client, target.base_url, target.metrics_path)
        ref_after_ms = None if interrupted else settled_reference_ms(ref_before_ms)
    records = [finished[i] for i in sorted(finished)]
    return RunOutcome(
        records=records,
        scheduled=n,
        target_rate_per_s=math.nan if closed_loop else schedule.rate_per_s,
        duration_s=max(0.0, last_done_s - start_s),
        complete=stop is None and len(records) == n,
        stop_reason=None if stop is None else stop.message,
        stopped_by=None if stop is None else stop.reason,
        merged_chunks_mode=options.merged_chunks,
        concurrency=options.concurrency,
        continuous_usage=options.continuous_usage,
        client_cpu_share=cpu_s / wall_s if wall_s > 0 else None,
        machine_ref_before_ms=ref_before_ms,
        machine_ref_after_ms=ref_after_ms,
        server_before=before,
        server_after=after,
        wake_late_s=np.array([_late_s(send_times[live.record.request_id]) for live in records]),
        prompt_form=options.prompt_form,
        endpoint=options.endpoint,
        content_salt=options.content_salt or 0,
    )
