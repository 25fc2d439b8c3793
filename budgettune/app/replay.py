"""`replay`: launch (or connect to) one engine, replay a schedule through the load generator,
summarise with the shared metrics, and write results.json. No flag parsing, no tables."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgettune.artifacts.results import RESULTS_FILE, Results, save_results
from budgettune.core.errors import StorageError
from budgettune.core.metrics import MetricsSummary, summarize
from budgettune.core.units import finite_or_none
from budgettune.engines.base import EngineHandle, LaunchSpec, ProgressCallback
from budgettune.engines.facts import EngineFacts
from budgettune.engines.registry import get_engine
from budgettune.loadgen.runner import (
    RunOptions,
    RunOutcome,
    RunProgress,
    StopRule,
    Target,
    run_schedule,
)
from budgettune.loadgen.server_metrics import ServerSide, server_side
from budgettune.trace.schedule import Schedule

FAILURE_REASONS_SHOWN = 5


@dataclass(slots=True, frozen=True)
class ReplayConfig:
    """One replay. ``config`` is the full command configuration stored in results.json;
    ``output_dir`` None writes nothing."""

    engine: str
    spec: LaunchSpec
    run: RunOptions
    traffic: str  # one-line description of the traffic
    output_dir: Path | None = None
    command: tuple[str, ...] = ()
    config: Mapping[str, object] = field(default_factory=dict)
    hardware: Mapping[str, object] | None = None
    write_report: bool = False  # report.html beside results.json (a sweep writes one for all)
    rate_per_s: float | None = None  # the nominal rate asked for (None: the schedule's own)


@dataclass(slots=True)
class ReplayResult:
    """What the CLI prints: the outcome, its summary, the engine's facts, where results went."""

    outcome: RunOutcome
    summary: MetricsSummary
    engine: EngineFacts
    server: ServerSide
    failure_reasons: dict[str, int]
    results_file: Path | None = None
    report_file: Path | None = None
    engine_crashed: str | None = None
    rate_per_s: float | None = None
    # the disk could not hold results.json: the figures above are all there is of the run
    save_error: StorageError | None = None

    @property
    def complete(self) -> bool:
        return self.outcome.complete and self.engine_crashed is None

    def to_json(self) -> dict[str, Any]:  # results.json's point and `replay --json`
        """One point in ``simulate``'s shape plus the load generator's self-check."""
        return {
            "budget": self.engine.budget_tokens,
            "rate": self.rate_per_s or finite_or_none(self.outcome.target_rate_per_s),
            **self.summary.to_json(),
            "failure_reasons": self.failure_reasons,
            "selfcheck": {**self.outcome.selfcheck().to_json(), "server": self.server.to_json()},
            "engine": self.engine.to_json(log_tail=False),
            "complete": self.complete,
            "results_file": str(self.results_file) if self.results_file else None,
        }


def failure_reasons(outcome: RunOutcome) -> dict[str, int]:
    """Failed requests counted by reason, numbers stripped so alike reasons group together."""
    counts: dict[str, int] = {}
    for live in outcome.records:
        if live.record.ok:
            continue
        reason = live.record.error or f"short output {len(live.record.token_times_s)}"
        key = " ".join("N" if word.strip(".,:/()").isdigit() else word for word in reason.split())
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    return dict(ranked[:FAILURE_REASONS_SHOWN])


async def _settle_exit(handle: EngineHandle, timeout_s: float = 2.0) -> None:
    """A killed server's sockets close a moment before its exit can be reaped, so the client
    sees cut streams while the process still looks alive: give a failing run's engine a moment
    to show its exit, so a crash is reported as one."""
    deadline = time.monotonic() + timeout_s
    while handle.alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def run_replay(
    config: ReplayConfig,
    schedule: Schedule,
    *,
    on_start: ProgressCallback | None = None,
    on_ready: Callable[[EngineHandle], None] | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    stop_rule: StopRule | None = None,
) -> ReplayResult:
    """Start the engine, replay ``schedule``, stop the engine, summarise, write results.

    Raises EngineError when the engine does not start (nothing is written then), UserError for
    an unknown engine or an unwritable output. A Ctrl-C during the replay still returns (and
    writes) the partial run, marked incomplete; during the start it propagates.
    """
    async with launched(config, on_start=on_start, on_ready=on_ready) as handle:
        result = await replay_on(
            handle, config, schedule, on_progress=on_progress, stop_rule=stop_rule
        )
    save_replay(config, result)
    return result


@contextlib.asynccontextmanager
async def launched(
    config: ReplayConfig,
    *,
    on_start: ProgressCallback | None = None,
    on_ready: Callable[[EngineHandle], None] | None = None,
) -> AsyncIterator[EngineHandle]:
    """The engine of ``config`` started (and stopped on leaving), for one or more replays."""
    async with get_engine(config.engine).launch(config.spec, on_start) as handle:
        if on_ready is not None:
            on_ready(handle)
        yield handle


async def replay_on(
    handle: EngineHandle,
    config: ReplayConfig,
    schedule: Schedule,
    *,
    on_progress: Callable[[RunProgress], None] | None = None,
    stop_rule: StopRule | None = None,
) -> ReplayResult:
    """Replay ``schedule`` against the running engine ``handle`` and summarise it (nothing
    written: :func:`save_replay`). An engine that exited during the replay is reported in
    ``engine_crashed`` with its log tail."""
    outcome = await run_schedule(
        schedule,
        Target(handle.url, handle.model, config.spec.api_key, handle.metrics_path),
        config.run,
        on_progress=on_progress,
        stop_rule=stop_rule,
    )
    facts = EngineFacts.of(handle, config.spec)
    crashed: str | None = None
    if any(not live.record.ok for live in outcome.records):
        await _settle_exit(handle)
    if not handle.alive():
        crashed = f"engine exited with status {handle.exit_code()} during the replay"
        facts = facts.with_crash(crashed, handle.log_tail(30))
    summary = summarize([live.record for live in outcome.records],
                        warmup_requests=config.run.warmup_requests)  # fmt: skip
    return ReplayResult(
        outcome=outcome,
        summary=summary,
        engine=facts,
        server=server_side(outcome.server_before, outcome.server_after),
        failure_reasons=failure_reasons(outcome),
        engine_crashed=crashed,
        rate_per_s=config.rate_per_s,
    )


def save_replay(config: ReplayConfig, result: ReplayResult, output_dir: Path | None = None) -> None:
    """Write ``result``'s results.json (and report.html when ``config.write_report``) into
    ``output_dir`` (default ``config.output_dir``; neither: nothing is written), and note the
    paths in ``result``. A full disk is noted in ``result.save_error``, not raised: the run was
    measured, and the caller says what was not saved."""
    folder = output_dir or config.output_dir
    if folder is None:
        return
    try:
        # -o names a folder (the engine log is already in it), whatever its name ends with.
        result.results_file = save_results(_results(config, result), folder / RESULTS_FILE)
        if config.write_report:
            from budgettune.app.report import run_report  # plotly only when writing a page

            result.report_file = run_report(result.results_file).path
    except StorageError as error:  # measured, but not saved: the caller says so
        result.save_error = error


def _results(config: ReplayConfig, result: ReplayResult) -> Results:
    point = result.to_json()
    point.pop("results_file", None)
    point["records"] = [live.to_json() for live in result.outcome.records]
    reasons = [r for r in (result.outcome.stop_reason, result.engine_crashed) if r]
    return Results(
        kind="replay",
        config={**config.config, "traffic": config.traffic},
        points=[point],
        command=list(config.command),
        engine=result.engine.to_json(),
        hardware=None if config.hardware is None else dict(config.hardware),
        complete=result.complete,
        incomplete_reason="; ".join(reasons) or None,
    )
