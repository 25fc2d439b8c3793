"""The load generator against a real sim engine subprocess over real HTTP: exact token counts,
the chunking trade-off, failures counted (too long, engine killed, error-rate abort)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest

from budgettune.app.replay import ReplayConfig, run_replay
from budgettune.core.metrics import summarize, ttft_s
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.process import free_port, group_members
from budgettune.loadgen.runner import RunOptions, RunOutcome, Target, run_schedule
from budgettune.loadgen.server_metrics import server_side
from budgettune.loadgen.stop import StopReason
from budgettune.trace.schedule import Schedule


def _schedule(targets: list[float], prompts: list[int], outputs: list[int]) -> Schedule:
    return Schedule(
        target_s=np.array(targets, dtype=np.float64),
        prompt_tokens=np.array(prompts, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
    )


def _replay(
    schedule: Schedule, spec: LaunchSpec, options: RunOptions | None = None
) -> tuple[RunOutcome, int]:
    async def scenario() -> tuple[RunOutcome, int]:
        async with SimEngine().launch(spec) as handle:
            assert handle.pid is not None
            target = Target(handle.url, handle.model)
            return await run_schedule(schedule, target, options or RunOptions()), handle.pid

    outcome, pid = asyncio.run(scenario())
    assert not group_members(pid)  # nothing left behind
    return outcome, pid


@pytest.mark.timing
def test_exact_token_counts_send_times_and_selfcheck(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 12
    schedule = _schedule(
        list(np.cumsum(rng.exponential(0.05, n)) - 0.01),
        list(rng.integers(20, 300, n)),
        list(rng.integers(1, 20, n)),
    )
    outcome, _ = _replay(schedule, LaunchSpec(budget_tokens=512, log_path=tmp_path / "e.log"))
    assert outcome.complete and len(outcome.records) == n
    for live, wanted in zip(outcome.records, schedule.output_tokens, strict=True):
        record = live.record
        assert record.ok, record.error
        assert len(record.token_times_s) == wanted == live.usage["completion_tokens"]  # type: ignore[index]
        assert record.prompt_tokens == live.usage["prompt_tokens"]  # type: ignore[index]
        assert np.all(np.diff(record.token_times_s) >= 0)
        assert record.token_times_s[0] > record.sent_s >= record.target_s - 1e-4  # never early
    check = outcome.selfcheck()
    assert check.sent == check.scheduled == n and check.merged_chunks == 0
    # The send time is after the timer woke (the lag includes the timer's own lateness).
    lags = np.array([live.record.sent_s - live.record.target_s for live in outcome.records])
    assert len(outcome.wake_late_s) == n and np.all(lags >= outcome.wake_late_s - 1e-6)
    assert check.timer_lateness.max_ms is not None and check.send_lag.max_ms is not None
    assert check.timer_lateness.max_ms <= check.send_lag.max_ms
    assert check.send_lag.max_ms < 50  # loose: the machine is shared
    # The server's own counters over the run (the readiness request came before it).
    server = server_side(outcome.server_before, outcome.server_after)
    assert server.counters["generation_tokens_total"] == sum(schedule.output_tokens)
    assert server.ttft is not None and server.ttft.count == n
    summary = summarize([live.record for live in outcome.records])
    assert summary.completed == n and summary.failed == 0
    # The machine's speed, read before the first send and after the last response.
    before, after = check.machine_ref_before_ms, check.machine_ref_after_ms
    assert before is not None and after is not None and before > 0 and after > 0
    assert check.to_json()["machine_ref_ms"] == {"before": before, "after": after}


@pytest.mark.timing
def test_larger_budget_lowers_long_prompt_ttft_and_raises_p99_tbt(tmp_path: Path) -> None:
    # Four requests decode for ~1 s while three 2000-token prompts arrive among them.
    schedule = _schedule(
        [0.0, 0.01, 0.02, 0.03, 0.15, 0.45, 0.75],
        [100, 100, 100, 100, 2000, 2000, 2000],
        [150, 150, 150, 150, 2, 2, 2],
    )
    results = {}
    for budget in (128, 2048):
        spec = LaunchSpec(budget_tokens=budget, log_path=tmp_path / f"e{budget}.log")
        outcome, _ = _replay(schedule, spec)
        records = [live.record for live in outcome.records]
        assert all(r.ok for r in records)
        long_ttft = float(np.median(ttft_s(records[4:])))
        results[budget] = (long_ttft, summarize(records[:4]).tbt_s.p99)
    (ttft_small, tbt_small), (ttft_large, tbt_large) = results[128], results[2048]
    # Modeled: ~110 ms vs ~57 ms TTFT (chunks of 124 tokens sit below the ridge), and a
    # decoder gap of ~7 ms vs ~57 ms when a whole prompt shares the iteration.
    assert ttft_large < 0.8 * ttft_small, results
    assert tbt_large > 3 * tbt_small, results


def test_too_long_request_is_a_counted_failure(tmp_path: Path) -> None:
    schedule = _schedule([0.0, 0.02, 0.04, 0.06], [100, 400, 50, 60], [5, 200, 5, 5])
    spec = LaunchSpec(max_model_len=512, log_path=tmp_path / "e.log")
    outcome, _ = _replay(schedule, spec)
    errors = [live.record.error for live in outcome.records]
    assert errors[0] is None and errors[2] is None and errors[3] is None
    assert errors[1] is not None and errors[1].startswith(
        "http 400: This model's maximum context length is 512 tokens"
    )
    assert outcome.records[1].http_status == 400
    summary = summarize([live.record for live in outcome.records])
    assert (summary.completed, summary.failed) == (3, 1)
    assert summary.ttft_s.max == float("inf")  # the failure counts as an SLO violation


def test_error_rate_abort_stops_sending(tmp_path: Path) -> None:
    schedule = _schedule([i * 0.02 for i in range(40)], [300] * 40, [4] * 40)
    spec = LaunchSpec(max_model_len=256, log_path=tmp_path / "e.log")
    outcome, _ = _replay(schedule, spec, RunOptions(max_error_rate=0.5))
    assert not outcome.complete
    assert outcome.stop_reason is not None and "--max-error-rate 50%" in outcome.stop_reason
    assert outcome.stopped_by is StopReason.ERROR_RATE
    assert 10 <= len(outcome.records) < 40
    assert all(not live.record.ok for live in outcome.records)


def test_engine_killed_mid_run_fails_requests_and_marks_the_crash(tmp_path: Path) -> None:
    schedule = _schedule([i * 0.05 for i in range(12)], [100] * 12, [150] * 12)
    config = ReplayConfig(
        engine="sim",
        spec=LaunchSpec(budget_tokens=512, log_path=tmp_path / "engine.log"),
        run=RunOptions(request_timeout_s=10),
        traffic="test",
        output_dir=tmp_path / "run",
    )
    pids: list[int] = []

    async def scenario() -> object:
        async def killer() -> None:
            while not pids:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.4)
            os.kill(pids[0], signal.SIGKILL)

        task = asyncio.create_task(killer())
        result = await run_replay(
            config, schedule, on_ready=lambda handle: pids.append(handle.pid or 0)
        )
        await task
        return result

    result = asyncio.run(scenario())
    assert not group_members(pids[0])
    assert result.engine_crashed == "engine exited with status -9 during the replay"  # type: ignore[attr-defined]
    summary = result.summary  # type: ignore[attr-defined]
    assert summary.failed >= 6 and summary.completed + summary.failed == 12
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["complete"] is False and "exited with status -9" in saved["incomplete_reason"]
    reasons = {r["error"].split(" ")[0] for r in saved["points"][0]["records"] if r["error"]}
    assert reasons <= {"stream", "connect"}, reasons


def test_stalled_stream_times_out_and_refused_connections_fail(tmp_path: Path) -> None:
    schedule = _schedule([0.0, 0.01], [50, 50], [3, 3])
    # A 200x slower engine: its first iteration lasts ~1.3 s, beyond the 0.5 s stall limit.
    spec = LaunchSpec(extra_args=("--time-scale", "200"), log_path=tmp_path / "slow.log")
    outcome, _ = _replay(schedule, spec, RunOptions(request_timeout_s=0.5))
    assert [live.record.error for live in outcome.records] == [
        "timeout (ReadTimeout) after 0 tokens"
    ] * 2
    nowhere = Target(f"http://127.0.0.1:{free_port()}", "m")
    refused = asyncio.run(run_schedule(schedule, nowhere, RunOptions(connect_timeout_s=2)))
    errors = [live.record.error or "" for live in refused.records]
    assert len(errors) == 2 and all(e.startswith("connect error") for e in errors), errors
    assert refused.server_before is None and refused.complete  # nothing to scrape, all tried


def test_merged_chunks_are_counted_and_spread(tmp_path: Path) -> None:
    schedule = _schedule([0.0, 0.05], [40, 40], [10, 10])
    spec = LaunchSpec(extra_args=("--stream-interval", "4"), log_path=tmp_path / "e.log")
    for mode in ("spread", "first"):
        # Usage in every chunk tells how many tokens each carried.
        options = RunOptions(merged_chunks=mode, continuous_usage=True)
        outcome, _ = _replay(schedule, spec, options)
        for live in outcome.records:
            assert live.record.ok and live.chunk_tokens.tolist() == [1, 4, 4, 1]
            assert live.record.merged_chunks == 2
            times = live.record.token_times_s
            within_chunk_gaps = np.diff(times)[1:4]  # tokens 2..5 came in one chunk
            if mode == "first":
                assert np.all(within_chunk_gaps == 0)
            else:  # the chunk's gap divided evenly over its 4 tokens
                assert np.allclose(within_chunk_gaps, within_chunk_gaps[0]) and times[1] > times[0]
                assert within_chunk_gaps[0] == pytest.approx((times[4] - times[0]) / 4)
        check = outcome.selfcheck()
        assert (check.merged_chunks, check.chunks) == (4, 8)
        assert check.merged_chunks_warning and check.merged_chunks_mode == mode
    # Without it (the default) a chunk counts one token; the final usage settles the total on
    # the last chunk, which the self-check counts as merged, so the warning still shows.
    outcome, _ = _replay(schedule, spec, RunOptions())
    for live in outcome.records:
        assert live.record.ok and live.chunk_tokens.tolist() == [1, 1, 1, 7]
    assert outcome.selfcheck().merged_chunks_warning and not outcome.continuous_usage
