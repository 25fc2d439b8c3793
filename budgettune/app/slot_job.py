"""One verification run away from the sweep's own process, in a slot: a :class:`SlotJob` (the
config, the budget, the schedules it may replay, its slot and port; picklable) and
:func:`run_job`, which runs it in a worker (a local process, or a Ray task on another node) and
returns the point as JSON with, when the worker wrote into a folder of its own, the files it wrote.

The worker is the slot's load generator: it pins itself to the slot's client CPUs and starts the
engine on the slot's GPUs and engine CPUs, so two slots' clients never share a core.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgettune.app.slots import Slot
from budgettune.trace.schedule import Schedule
from budgettune.tune.point import Predicted, Role
from budgettune.tune.sweep_config import SweepConfig

# What a worker tells the driver while it runs, one tuple per event: ("start", budget, text),
# ("ready", budget), ("replay", budget, finished, total, failed), ("message", text).
Event = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class SlotJob:
    """Verify ``budget`` in ``slot``: replay ``schedules[0]``, then ``schedules[k]`` for each
    re-measure (as many as ``config.max_replays`` allows), the engine on ``port``."""

    config: SweepConfig
    budget: int
    role: Role
    predicted: Predicted | None
    schedules: tuple[Schedule, ...]
    slot: Slot
    port: int | None
    round: int
    early_stop: bool = True


@dataclass(frozen=True, slots=True)
class JobResult:
    """The point as points.jsonl holds it, and the files the worker wrote under a folder of its
    own (paths relative to the run folder; empty when it wrote into the run folder itself)."""

    point: dict[str, object]
    files: dict[str, bytes] = field(default_factory=dict)
    worker: str = ""  # where it ran, e.g. "pid 4242 on node-3"


def run_job(
    job: SlotJob,
    on_event: Callable[[Event], None] | None = None,
    *,
    work_dir: Path | None = None,
) -> JobResult:
    """Run ``job`` here (in this process, which becomes the slot's client) and return its point.
    ``work_dir``: write the replays' files there instead of the run folder, and return them."""
    from budgettune.app.verify import verify_budget
    from budgettune.artifacts.points import point_json

    if job.slot.client_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, job.slot.client_cpus)
    config = job.config
    base = dataclasses.replace(
        config.base_spec,
        port=job.port,
        env={**config.base_spec.env, **job.slot.engine_env()},
        cpu_affinity=job.slot.engine_cpus,
    )
    config = dataclasses.replace(config, base_spec=base, run_dir=work_dir or config.run_dir)
    budget = job.budget

    def event(*values: Any) -> None:
        if on_event is not None:
            on_event(values)

    def reseeded(replay: int) -> Schedule:
        return job.schedules[min(replay, len(job.schedules) - 1)]

    point = asyncio.run(
        verify_budget(
            config,
            job.schedules[0],
            reseeded,
            budget,
            job.role,
            job.predicted,
            early_stop=job.early_stop,
            on_start=lambda tick: event("start", budget, f"{tick.engine} {tick.phase}"),
            on_ready=lambda handle: event("ready", budget),
            on_replay=lambda tick: event(
                "replay", budget, tick.finished, len(job.schedules[0]), tick.failed
            ),
            say=lambda text: event("message", text),
        )
    )
    point = dataclasses.replace(point, slot=job.slot.index, round=job.round)
    files: dict[str, bytes] = {}
    if work_dir is not None:
        for path in sorted(work_dir.rglob("*")):
            if path.is_file():
                files[str(path.relative_to(work_dir))] = path.read_bytes()
    return JobResult(point_json(point), files, f"pid {os.getpid()} on {os.uname().nodename}")
