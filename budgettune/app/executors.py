"""Who runs a sweep's verifications, one round at a time: :class:`InProcess` (one slot: the sweep's
own process, exactly as without ``--parallel``) or :class:`LocalProcesses` (a process per slot,
each its own load generator); Ray's executor lives in :mod:`budgettune.app.executor_ray`.

Every executor hands each point to ``on_point`` the moment it is finished (the sweep appends it
to points.jsonl then), and on Ctrl-C stops every slot's engine and client before raising
KeyboardInterrupt: a point not finished is left out, so ``--resume`` runs it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from budgettune.app.slot_job import Event, JobResult, SlotJob, run_job
from budgettune.artifacts.points import read_point
from budgettune.core.errors import EngineError, StorageError
from budgettune.tune.point import Point, Status

if TYPE_CHECKING:
    from budgettune.app.profile import HeldEngine

STOP_GRACE_S = 20.0  # a worker told to stop has this long to stop its engine
EVENT_POLL_S = 0.2
LAST_WORD_S = 2.0  # a slot's process found gone: its last message may take this long


@dataclass(slots=True)
class RoundEvents:
    """Callbacks for the live display of a round; every one optional. ``on_slot``: one line of
    what a slot is doing now."""

    on_slot: Callable[[int, str], None] | None = None
    on_message: Callable[[str], None] | None = None
    on_replay: Callable[..., None] | None = None  # the one slot of an InProcess round
    on_start: Callable[..., None] | None = None
    on_ready: Callable[..., None] | None = None
    on_launch: Callable[[int, str], None] | None = None  # budget, role: an engine is started


class Executor(Protocol):
    name: str  # "local" or "ray", recorded in recommendation.json

    @property
    def first_budget(self) -> int | None:
        """A budget whose engine already runs (the profile step's), to verify before any
        other; None when there is none."""
        ...

    async def run_round(
        self, jobs: Sequence[SlotJob], on_point: Callable[[Point], None], events: RoundEvents
    ) -> list[Point]: ...

    def close(self) -> None: ...


class InProcess:
    """One slot: verify in this process, one job after another (the sweep's own event loop).
    ``held``: an engine the profile step left running at a budget, replayed on by that budget's
    job and stopped after it (or by :meth:`close`, when no job used it)."""

    name = "local"

    def __init__(self, held: HeldEngine | None = None) -> None:
        self.held = held

    @property
    def first_budget(self) -> int | None:
        return None if self.held is None else self.held.budget_tokens

    async def run_round(
        self, jobs: Sequence[SlotJob], on_point: Callable[[Point], None], events: RoundEvents
    ) -> list[Point]:
        from budgettune.app.verify import NotSaved, verify_budget

        points = []
        for job in jobs:
            held = None
            if self.held is not None and job.budget == self.held.budget_tokens:
                held, self.held = self.held, None
            if events.on_launch is not None:
                events.on_launch(job.budget, job.role)
            try:
                point = await verify_budget(
                    job.config,
                    job.schedules[0],
                    lambda k, job=job: job.schedules[min(k, len(job.schedules) - 1)],  # type: ignore[misc]
                    job.budget,
                    job.role,
                    job.predicted,
                    early_stop=job.early_stop,
                    on_start=events.on_start,
                    on_ready=events.on_ready,
                    on_replay=events.on_replay,
                    say=events.on_message,
                    held=held,
                )
            except NotSaved as missing:  # the point first, then the full disk stops the sweep
                on_point(dataclasses.replace(missing.point, round=job.round))
                raise missing.error from None
            point = dataclasses.replace(point, round=job.round)
            on_point(point)
            points.append(point)
        return points

    def close(self) -> None:
        if self.held is not None:
            self.held.close()
            self.held = None


class LocalProcesses:
    """A process per job (spawned: no state shared with this one), each the load generator of its
    slot; they tell this process what they do through a queue."""

    name = "local"
    first_budget = None  # each slot's worker launches its own engines

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")

    async def run_round(
        self, jobs: Sequence[SlotJob], on_point: Callable[[Point], None], events: RoundEvents
    ) -> list[Point]:
        messages = self._context.Queue()
        workers = {
            job.budget: self._context.Process(
                target=_worker_main, args=(job, messages), name=f"budgettune-slot-{job.slot.index}"
            )
            for job in jobs
        }
        by_budget = {job.budget: job for job in jobs}
        for worker in workers.values():
            worker.start()
        points: dict[int, Point] = {}
        dead_since: dict[int, float] = {}
        try:
            while len(points) < len(jobs):
                try:
                    message = await asyncio.to_thread(messages.get, True, EVENT_POLL_S)
                except queue.Empty:
                    now = time.monotonic()
                    for budget, worker in workers.items():
                        if budget in points or worker.is_alive():
                            continue
                        # its last message may still be on its way: wait a moment for it
                        if now - dead_since.setdefault(budget, now) < LAST_WORD_S:
                            continue
                        reason = f"the slot's process exited with status {worker.exitcode}"
                        points[budget] = failed_point(by_budget[budget], reason, Status.LOST)
                        on_point(points[budget])
                    continue
                kind, budget, *rest = message
                job = by_budget[budget]
                if kind == "event":
                    _show(rest[0], job, events)
                elif kind == "done":
                    result: JobResult = rest[0]
                    points[budget] = read_point(result.point, f"slot {job.slot.index}")
                    on_point(points[budget])
                elif kind == "failed":
                    points[budget] = failed_point(job, rest[0])
                    on_point(points[budget])
                elif kind == "not_saved":  # the point first, then the full disk stops the sweep
                    document, reason = rest[0]
                    points[budget] = read_point(document, f"slot {job.slot.index}")
                    on_point(points[budget])
                    raise StorageError(reason)
        except (asyncio.CancelledError, KeyboardInterrupt):
            _stop_all(workers.values())
            raise KeyboardInterrupt from None
        except BaseException:  # a full disk, a bug: stop the other slots before going
            _stop_all(workers.values())
            raise
        finally:
            for worker in workers.values():
                worker.join(timeout=STOP_GRACE_S)
            _stop_all(workers.values())
            messages.close()
        return [points[job.budget] for job in jobs]

    def close(self) -> None:
        pass


def _show(event: Event, job: SlotJob, events: RoundEvents) -> None:
    kind = event[0]
    slot = job.slot.index
    if kind == "message" and events.on_message is not None:
        events.on_message(str(event[1]))
    elif events.on_slot is None:
        return
    elif kind == "start":
        events.on_slot(slot, f"budget {job.budget}: {event[2]}")
    elif kind == "ready":
        events.on_slot(slot, f"budget {job.budget}: replaying")
    elif kind == "replay":
        finished, total, failed = event[2:5]
        events.on_slot(slot, f"budget {job.budget}: {finished}/{total} done, {failed} failed")


def _worker_main(job: SlotJob, messages: Any) -> None:
    """A slot's process: run the job, send its events and result. SIGTERM (the sweep stopping
    it, or dying: the parent-death signal) takes the Ctrl-C path, which stops its engine."""
    _die_with_parent()
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
    last_progress = [0.0]

    def on_event(event: Event) -> None:
        if event[0] == "replay":  # progress at most a few times a second
            now = time.monotonic()
            if now - last_progress[0] < 0.5:
                return
            last_progress[0] = now
        messages.put(("event", job.budget, event))

    from budgettune.app.verify import NotSaved
    from budgettune.artifacts.points import point_json

    try:
        result = run_job(job, on_event)
    except KeyboardInterrupt:
        return  # stopped: the engine is stopped; the point is left out
    except NotSaved as missing:
        point = dataclasses.replace(missing.point, slot=job.slot.index, round=job.round)
        messages.put(("not_saved", job.budget, (point_json(point), str(missing.error))))
        return
    except EngineError as error:
        messages.put(("failed", job.budget, str(error)))
        return
    except Exception:  # report what broke in the slot instead of a silent hang
        messages.put(("failed", job.budget, traceback.format_exc(limit=3).strip()[-2000:]))
        return
    messages.put(("done", job.budget, result))


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM when the sweep's process dies (even by SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)


def _stop_all(workers: Any) -> None:
    """SIGTERM each live worker (it stops its engine), wait, then SIGKILL what is left."""
    alive: list[BaseProcess] = [w for w in workers if w.is_alive()]
    for worker in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid or 0, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for worker in alive:
        worker.join(timeout=max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            worker.kill()
            worker.join(timeout=5)


def failed_point(job: SlotJob, reason: str, status: Status = Status.ENGINE_FAILED) -> Point:
    """The point of a verification that measured nothing: its engine did not start, its slot's
    process broke (ENGINE_FAILED), or its worker was lost (LOST: re-queued, --resume reruns)."""
    return Point(
        budget=job.budget, role=job.role, rate_per_s=job.config.rate_per_s,
        predicted=job.predicted, status=status, error=reason, tbt_ok=None, ttft_ok=None,
        ok=False, wall_s=0.0, replays=0, slot=job.slot.index, round=job.round,
    )  # fmt: skip


def place_files(run_dir: Path, result: JobResult, work_dir: str) -> dict[str, object]:
    """Write the files a worker returned into the run folder (atomically; StorageError on a
    full disk) and point the point's paths (``results_file``, ``replay_files``, the engine log)
    at them; returns the point's JSON."""
    from budgettune.core.files import make_folder, write_atomic

    for relative, content in result.files.items():
        target = run_dir / relative
        make_folder(target.parent, field="output")
        write_atomic(target, content, field="output")

    def moved(path: object) -> object:
        text = str(path)
        if not text.startswith(work_dir):
            return path
        return str(run_dir / Path(text).relative_to(work_dir))

    point = dict(result.point)
    if point.get("results_file"):
        point["results_file"] = moved(point["results_file"])
    replays = point.get("replay_files")
    point["replay_files"] = [moved(p) for p in replays] if isinstance(replays, list) else []
    engine = point.get("engine")
    if isinstance(engine, dict) and engine.get("log"):
        point["engine"] = {**engine, "log": moved(engine["log"])}
    return point
