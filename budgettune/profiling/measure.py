"""The engine path of `budgettune profile` (vllm, sglang, sim): the three series measured through
the engine's own OpenAI API on one launched server.

- prefill: TTFT of one request (P random token ids, one output token); it carries a fixed
  request overhead (HTTP, tokenising, queueing) that the step-time fit estimates apart;
- decode: b concurrent requests with L-token prompts; once every one of them decodes, the gaps
  between their tokens are decode iterations (per iteration, the median over the requests);
- mixed: b decoders in steady decode, then a P-token prompt injected: the decoders' gap that
  ends with the prompt's first token is the mixed iteration.

The engine runs on an event loop in a thread of its own, so the probe loop stays synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

import httpx
import numpy as np

from budgettune.core.errors import EngineError
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback
from budgettune.engines.registry import get_engine
from budgettune.loadgen.client import Endpoint, SSEParser, StreamResult, request_body
from budgettune.loadgen.server_metrics import sample_labels
from budgettune.loadgen.transport import arrival_ns, async_client
from budgettune.model.profile import EngineInfo, Hardware, Probe
from budgettune.profiling.plan import ProbeSpec, describe, tight

T = TypeVar("T")
SPACING_ITERATIONS = 3  # decode iterations between two injected prompts of the mixed series
MIN_STEADY_GAPS = 64  # decode iterations with every request decoding, at least
MIN_RUN_ITERATIONS = 3  # iterations per timed run of the steady window
ADMISSION_ATTEMPTS = 3  # decoders restarted with longer outputs when not admitted together
POLL_S = 0.0005
FIRST_TOKEN_IDS = 100  # random prompt ids start here, clear of special tokens


class _LoopThread:
    """An event loop running in a daemon thread; ``call`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout_s)
        except BaseException:
            future.cancel()
            raise

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self.loop.close()


def steady_iterations(arrivals_ns: list[list[int]], segments: int) -> tuple[np.ndarray, float]:
    """Decode iteration times from b token streams that decode side by side.

    The window runs from the last stream's first token to the first stream's last token, when
    every stream emits one token per iteration. It is cut into ``segments`` runs of at least 3
    iterations; each run's time per iteration is its span over its length (one token's jitter
    spreads over the run), the median over the streams. Tokens that reached us bunched (same
    arrival stamp: the server or our loop was late) end a run only as the last of their bunch:
    the bunch left when that token was made, the ones before it had waited.
    Returns (seconds per iteration of each run, mean number of tokens generated before the
    iterations measured).
    """
    start = max(a[0] for a in arrivals_ns)
    end = min(a[-1] for a in arrivals_ns)
    inside = [np.array([t for t in a if start <= t <= end], dtype=np.float64) for a in arrivals_ns]
    offsets = [
        a.index(int(w[0])) if len(w) else 0 for a, w in zip(arrivals_ns, inside, strict=True)
    ]
    count = min(len(w) for w in inside)
    if count < 2:
        return np.empty(0), math.nan
    runs = max(1, min(segments, (count - 1) // MIN_RUN_ITERATIONS))
    bounds = np.linspace(0, count - 1, runs + 1).round().astype(int)
    clean = [np.r_[w[1:] != w[:-1], True][:count] for w in inside]
    times = []
    for k0, k1 in itertools.pairwise(bounds):
        rates = []
        for w, ok in zip(inside, clean, strict=True):
            ends = np.flatnonzero(ok[k0 : k1 + 1]) + k0
            if len(ends) >= 2 and ends[-1] > ends[0]:
                rates.append((w[ends[-1]] - w[ends[0]]) / (ends[-1] - ends[0]))
        if rates:
            times.append(float(np.median(rates)) / 1e9)
    # The iteration ending with token j ran at context prompt + j; the gaps end with tokens
    # offset + 1 .. offset + count - 1.
    index = float(np.mean(offsets)) + count / 2.0
    return np.array(times), index


def kv_capacity_from_metrics(text: str) -> int | None:
    """KV-cache tokens from vLLM's ``vllm:cache_config_info`` gauge (num_gpu_blocks x
    block_size); None when the engine does not publish it or the text does not parse."""
    try:
        labels = sample_labels(text, "vllm:cache_config_info")
    except ValueError:
        return None
    if labels is None:
        return None
    try:
        return int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        return None


class EngineTimer:
    """Launches one engine for the whole profile and times probe shapes through its API (an
    :class:`~budgettune.profiling.plan.IterationTimer`). Raises EngineError if it cannot start.

    request_timeout_s: the profile's --probe-timeout; a stream silent that long fails its probe.
    """

    request_overhead_series: tuple[str, ...] = ("prefill",)

    def __init__(
        self,
        engine_name: str,
        spec: LaunchSpec,
        *,
        vocab: int,
        hardware: Hardware,
        seed: int = 0,
        request_timeout_s: float = 600.0,
        on_start: ProgressCallback | None = None,
    ) -> None:
        if spec.budget_tokens is None:
            raise ValueError("the profile launches its engine with an explicit budget")
        self.budget_tokens = spec.budget_tokens
        self.max_model_len = spec.max_model_len
        self._vocab = max(vocab, FIRST_TOKEN_IDS + 2)
        self._rng = np.random.default_rng(seed)
        self._timeout = httpx.Timeout(request_timeout_s, connect=30.0)
        self._timeout_s = request_timeout_s
        self._api_key = spec.api_key
        self._loop = _LoopThread()
        self._context = get_engine(engine_name).launch(spec, on_start)
        try:
            self.handle: EngineHandle = self._loop.call(self._context.__aenter__())
            self._client: httpx.AsyncClient = self._loop.call(self._make_client())
        except BaseException:
            self._loop.close()
            raise
        self._url = self.handle.url.rstrip("/") + "/v1/completions"
        # KV tokens the engine can hold, when it says (vLLM: cache_config_info in /metrics).
        self.kv_capacity_tokens: int | None = self._loop.call(self._kv_capacity())
        self.hardware = hardware
        self.engine = EngineInfo(
            name=engine_name,
            version=self.handle.version,
            settings={
                "budget_tokens": spec.budget_tokens,
                "max_num_seqs": spec.max_num_seqs,
                "max_model_len": spec.max_model_len,
                "prefix_caching": spec.prefix_caching,
                "dtype": spec.dtype or "auto",
                "command": list(self.handle.command),
                "startup_s": round(self.handle.startup_s, 3),
                "timer": "client monotonic clock (TTFT; token gaps)",
            },
        )
        if spec.engine_config is not None:  # the user's file the launch read, credentials hidden
            from budgettune.engines.config_file import read_engine_config, redacted_text

            self.engine.settings["engine_config_text"] = redacted_text(
                read_engine_config(spec.engine_config)
            )

    async def _kv_capacity(self) -> int | None:
        try:
            url = self.handle.url.rstrip("/") + self.handle.metrics_path
            response = await self._client.get(url)
        except httpx.HTTPError:
            return None
        return kv_capacity_from_metrics(response.text) if response.status_code == 200 else None

    async def _make_client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        key = self._api_key
        headers = {"Authorization": f"Bearer {key}"} if key else None
        return async_client(self.handle.url, limits=limits, timeout=self._timeout, headers=headers)

    def close(self) -> None:
        """Stop the engine (its whole process group) and the loop thread."""
        try:
            with contextlib.suppress(Exception):
                self._loop.call(self._client.aclose(), 30)
            self._loop.call(self._context.__aexit__(None, None, None))
        finally:
            self._loop.close()

    # -- one stream ---------------------------------------------------------------------------

    def _body(self, prompt_tokens: int, max_tokens: int) -> bytes:
        ids = self._rng.integers(FIRST_TOKEN_IDS, self._vocab, prompt_tokens).tolist()
        # Usage in every chunk: the probes place each token at its iteration, so a chunk that
        # carries two tokens must say so (a replay counts from the stream instead).
        return request_body(
            Endpoint.COMPLETIONS, self.handle.model, ids, max_tokens, continuous_usage=True
        )

    async def _stream(self, body: bytes, result: StreamResult) -> None:
        parser = SSEParser(result)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        result.sent_ns = time.monotonic_ns()
        try:
            async with self._client.stream("POST", self._url, content=body, headers=headers) as r:
                result.http_status = r.status_code
                if r.status_code != 200:
                    text = (await r.aread())[:200].decode("utf-8", errors="replace")
                    result.error = f"http {r.status_code}: {text}"
                    return
                async for data in r.aiter_raw():
                    parser.feed(data, arrival_ns(r))
            parser.finish()
        except httpx.TimeoutException as exc:
            result.error = (
                f"no answer within --probe-timeout {self._timeout_s:g} s "
                f"({type(exc).__name__} after {result.tokens} tokens)"
            )
        except httpx.HTTPError as exc:
            result.error = f"{type(exc).__name__} after {result.tokens} tokens"

    def _open(self, prompt_tokens: int, max_tokens: int) -> tuple[StreamResult, asyncio.Task[None]]:
        result = StreamResult(sent_ns=time.monotonic_ns())
        task = asyncio.create_task(self._stream(self._body(prompt_tokens, max_tokens), result))
        return result, task

    def _check(self, spec: ProbeSpec, results: list[StreamResult], expected: int) -> None:
        for result in results:
            if result.error is None and result.tokens != expected:
                result.error = f"{result.tokens} tokens instead of {expected}"
            if result.error is not None:
                tail = self.handle.log_tail(5)
                raise EngineError(f"probe {describe(spec)} failed: {result.error}", log_tail=tail)
        if not self.handle.alive():
            raise EngineError(
                f"the engine exited (status {self.handle.exit_code()}) during {describe(spec)}",
                log_tail=self.handle.log_tail(),
            )

    @staticmethod
    def _token_times(result: StreamResult) -> list[int]:
        """One arrival per token: a chunk carrying k tokens counts k tokens at its arrival."""
        out: list[int] = []
        for stamp, tokens in zip(result.chunk_ns, result.chunk_tokens, strict=True):
            out.extend([stamp] * tokens)
        return out

    def _decode_length(self, batch: int, context: int, extra: int, *, cap: bool = True) -> int:
        """Output tokens for decoders: room for their prompts to be prefilled in chunks while
        the first ones already decode, then ``extra`` iterations with all of them decoding
        (capped by the model length unless ``cap`` is false)."""
        spread = math.ceil(batch * context / max(self.budget_tokens - batch, 1)) + 2
        wanted = spread + extra
        if cap and self.max_model_len is not None:
            wanted = min(wanted, self.max_model_len - context)
        return max(wanted, 2)

    # -- the three series ---------------------------------------------------------------------

    async def _prefill(self, spec: ProbeSpec, repeats: int) -> Probe:
        times: list[float] = []
        for _ in range(repeats):
            result, task = self._open(spec.prompt_tokens, 1)
            await task
            self._check(spec, [result], 1)
            times.append((result.chunk_ns[0] - result.sent_ns) / 1e9)
            if tight(times):
                break  # the timings agree: more repeats would tell nothing new
        return Probe("prefill", spec.prompt_tokens, 0, 0, tuple(times), spec.tag)

    @contextlib.asynccontextmanager
    async def _decoders(self, spec: ProbeSpec, n: int) -> AsyncIterator[list[StreamResult]]:
        """``spec.batch`` streams with ``spec.context_tokens``-token prompts asking for up to
        ``n`` tokens; cut off (the engine aborts them) when the block ends."""
        opened = [self._open(spec.context_tokens, n) for _ in range(spec.batch)]
        streams = [result for result, _ in opened]
        tasks = [task for _, task in opened]
        try:
            yield streams
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self._check(spec, [s for s in streams if s.error is not None], 0)

    async def _all_decoding(self, spec: ProbeSpec, streams: list[StreamResult]) -> None:
        """Until every stream has its first two tokens (its prompt is in, it decodes)."""
        await self._until(spec, lambda: all(len(r.chunk_ns) >= 2 or r.done for r in streams))

    async def _together(
        self,
        spec: ProbeSpec,
        extra: int,
        during: Callable[[list[StreamResult]], Coroutine[Any, Any, None]],
    ) -> tuple[list[StreamResult], int]:
        """Start the decoders, wait until every one of them decodes, run ``during``, cut them.

        A server that admits the requests one after another (a starved API process) can finish
        the first before the last starts: then again with outputs four times longer.
        """
        for _ in range(ADMISSION_ATTEMPTS):
            wanted = self._decode_length(spec.batch, spec.context_tokens, extra, cap=False)
            n = self._decode_length(spec.batch, spec.context_tokens, extra)
            async with self._decoders(spec, n) as streams:
                await self._all_decoding(spec, streams)
                if not any(r.done for r in streams):
                    await during(streams)
                    return streams, n
            if n < wanted:
                break  # the model length allows no longer outputs
            extra *= 4
        raise EngineError(
            f"probe {describe(spec)}: the engine never ran the {spec.batch} requests side by "
            f"side (one finished its {n} tokens before another started); lower --max-batch"
        )

    async def _decode(self, spec: ProbeSpec, repeats: int) -> Probe:
        # Steady gaps are cheap (one decode iteration each): take plenty. Runs of 20 or more
        # iterations keep a late token's jitter (a CPU engine's API server bunches tokens of
        # 2-3 ms iterations) under a few percent of the run.
        steady = max(20 * repeats, MIN_STEADY_GAPS) + 2

        async def steady_tokens(streams: list[StreamResult]) -> None:
            marks = [r.tokens for r in streams]
            await self._until(
                spec,
                lambda: all(
                    r.tokens >= m + steady or r.done for r, m in zip(streams, marks, strict=True)
                ),
            )

        # Room for staggered admissions; the streams are cut once enough was seen.
        for _ in range(ADMISSION_ATTEMPTS):
            streams, n = await self._together(spec, 4 * steady + 32, steady_tokens)
            arrivals = [self._token_times(r) for r in streams]
            if spec.batch == 1:
                arrivals = [arrivals[0][1:]]  # its first gap follows the prefill: leave it out
            gaps, index = steady_iterations(arrivals, repeats)
            if len(gaps):
                break
            # Tokens that reached us in bursts (a starved API server) cannot be timed: again.
        else:
            raise EngineError(
                f"probe {describe(spec)}: the {spec.batch} streams never delivered timeable "
                f"tokens side by side ({ADMISSION_ATTEMPTS} tries of {n} tokens each; their "
                "tokens came in bursts): the engine's API server may be starved of CPU"
            )
        if spec.batch == 1:
            index += 1.0
        context = round(spec.context_tokens + index)
        return Probe("decode", 0, spec.batch, context, tuple(float(g) for g in gaps), spec.tag)

    async def _mixed(self, spec: ProbeSpec, repeats: int) -> Probe:
        injected: list[int] = []

        async def inject(streams: list[StreamResult]) -> None:
            lead = streams[0]
            for _ in range(repeats):
                result, task = self._open(spec.prompt_tokens, 1)
                await task
                self._check(spec, [result], 1)
                injected.append(result.chunk_ns[0])
                target = len(lead.chunk_ns) + SPACING_ITERATIONS
                await self._until(spec, lambda: len(lead.chunk_ns) >= target or lead.done)  # noqa: B023

        streams, _ = await self._together(spec, 2 * repeats * (SPACING_ITERATIONS + 3) + 32, inject)
        times, contexts = [], []
        for stamp in injected:
            gaps, ends = [], []
            for stream in streams:
                arrivals = np.array(self._token_times(stream), dtype=np.int64)
                i = int(np.argmin(np.abs(arrivals - stamp))) if len(arrivals) else 0
                if i < 1 or i >= len(arrivals):
                    continue
                gap = arrivals[i] - arrivals[i - 1]
                # The decoder's token of the mixed iteration arrives with the prompt's first
                # token; one further off than half the gap it ends belongs to another iteration.
                if gap > 0 and abs(int(arrivals[i]) - stamp) <= 0.5 * gap:
                    gaps.append(gap / 1e9)
                    ends.append(i)
            if gaps:
                times.append(float(np.median(gaps)))
                contexts.append(float(np.mean(ends)))
        if not times:
            raise EngineError(
                f"probe {describe(spec)}: could not find the decoders' iteration that held the "
                "injected prompt"
            )
        context = round(spec.context_tokens + float(np.mean(contexts)))
        return Probe("mixed", spec.prompt_tokens, spec.batch, context, tuple(times), spec.tag)

    async def _until(self, spec: ProbeSpec, condition: Callable[[], Any]) -> None:
        """Poll ``condition``; an engine that stops producing within the request timeout fails."""
        deadline = time.monotonic() + self._timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise EngineError(
                    f"probe {describe(spec)}: no progress within --probe-timeout "
                    f"{self._timeout_s:g} s",
                    log_tail=self.handle.log_tail(5),
                )
            await asyncio.sleep(POLL_S)

    # -- the IterationTimer protocol ----------------------------------------------------------

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        """Measure one probe shape ``repeats`` times (decode: every steady iteration seen)."""
        runner = {"prefill": self._prefill, "decode": self._decode, "mixed": self._mixed}
        return self._loop.call(runner[spec.series](spec, repeats))

    def warm_up(self, spec: ProbeSpec) -> None:
        """A short untimed run of the series (first requests pay for lazy initialisation)."""
        small = ProbeSpec(
            spec.series,
            min(spec.prompt_tokens, 256),
            min(spec.batch, 4),
            min(spec.context_tokens, 256),
        )
        self.time_probe(small, 2)
