"""Ray as the sweep's executor (``sweep --ray ADDRESS``): each verification is a Ray task asking
for its slot's GPUs (``num_gpus`` = tensor-parallel size on vLLM and SGLang, Ray sets
``CUDA_VISIBLE_DEVICES``), which starts the engine on its node, replays there against loopback,
and returns the point and its files to the driver, which writes the run folder as without Ray.

Ray is an optional extra (``pip install 'budgettune[ray]'``) and is imported only here. The
workers run budgettune from their own environment: install it on every node (the same version),
or give a runtime environment with ``RAY_RUNTIME_ENV``-style cluster configuration.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from budgettune.app.executors import RoundEvents, place_files
from budgettune.app.slot_job import JobResult, SlotJob, run_job
from budgettune.artifacts.points import read_point
from budgettune.core.errors import StorageError, UserError
from budgettune.tune.point import Point, Status

WAIT_S = 0.5


def _task(job: SlotJob) -> tuple[JobResult, str]:
    """A verification in a Ray worker: into a folder of its own, returned whole."""
    work_dir = Path(tempfile.mkdtemp(prefix="budgettune-ray-"))
    try:
        return run_job(job, work_dir=work_dir), str(work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


class RayExecutor:
    """Verifications as Ray tasks. ``address``: ``local`` starts a Ray instance of its own on this
    machine (stopped by :meth:`close`), ``auto`` joins the cluster ``RAY_ADDRESS`` names (or the
    one running here), anything else is a cluster address. Raises UserError without Ray, or
    when the cluster cannot be reached."""

    name = "ray"
    first_budget = None  # each task launches its engine on its node

    def __init__(self, address: str, *, gpus_per_task: float = 0.0) -> None:
        try:
            import ray
        except ImportError:
            raise UserError(
                "needs Ray, which is not installed", field="ray",
                hint="pip install 'budgettune[ray]'",
            ) from None  # fmt: skip
        self._ray = ray
        # Ray's own INFO lines would interleave with the sweep's console; its errors still show.
        options: dict[str, Any] = {
            "log_to_driver": False,
            "include_dashboard": False,
            "logging_level": "ERROR",
        }
        try:
            if address == "local":
                ray.init(address="local", **options)
            elif address == "auto":
                ray.init(address="auto", **options)
            else:
                ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise UserError(f"cannot reach Ray at {address!r}: {exc}", field="ray") from None
        self._remote = ray.remote(_task).options(num_gpus=gpus_per_task, num_cpus=1, max_retries=0)

    async def run_round(
        self, jobs: Sequence[SlotJob], on_point: Callable[[Point], None], events: RoundEvents
    ) -> list[Point]:
        ray = self._ray
        refs = {self._remote.remote(job): job for job in jobs}
        for job in jobs:
            if events.on_slot is not None:
                events.on_slot(job.slot.index, f"budget {job.budget}: on Ray")
        points: dict[int, Point] = {}
        pending = list(refs)
        try:
            while pending:
                ready, pending = await asyncio.to_thread(
                    ray.wait, pending, num_returns=1, timeout=WAIT_S
                )
                for ref in ready:
                    job = refs[ref]
                    point, not_saved = self._point(ref, job)
                    points[job.budget] = point
                    on_point(point)
                    if not_saved is not None:  # the point is saved; a full disk stops the sweep
                        raise not_saved
                    if events.on_slot is not None:
                        events.on_slot(job.slot.index, f"budget {job.budget}: done")
        except (asyncio.CancelledError, KeyboardInterrupt):
            for ref in pending:  # the workers die; their engines get the parent-death signal
                ray.cancel(ref, force=True)
            raise KeyboardInterrupt from None
        return [points[job.budget] for job in jobs]

    def _point(self, ref: Any, job: SlotJob) -> tuple[Point, StorageError | None]:
        """The task's point, and the error that kept its files off a full disk here, if one
        did (the point itself is still to be saved)."""
        from budgettune.app.executors import failed_point

        ray = self._ray
        try:
            result, work_dir = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # our code raised in the worker
            reason = str(exc).strip().splitlines()[-1][:500]
            return failed_point(job, reason, Status.ENGINE_FAILED), None
        except ray.exceptions.RayError as exc:  # the worker or its node was lost
            reason = f"the Ray worker was lost ({type(exc).__name__})"
            return failed_point(job, reason, Status.LOST), None
        missing: StorageError | None = None
        try:
            document = place_files(job.config.run_dir, result, work_dir)
        except StorageError as error:
            document, missing = dict(result.point), error
        return read_point(document, f"ray task for budget {job.budget}"), missing

    def close(self) -> None:
        """Disconnect; stops the Ray instance ``local`` started (its processes with it)."""
        self._ray.shutdown()
