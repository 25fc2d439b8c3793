"""The sweep's run folder: its settings (``sweep.json``) and every finished point
(``points.jsonl``), each written and read here only, validated on read.

``sweep.json`` holds what the sweep was asked (so ``--resume`` can refuse a different question);
``points.jsonl`` gets one line per finished budget the moment it finishes, so a crash or Ctrl-C
loses at most the point in progress, and a resumed sweep re-runs nothing that finished.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budgettune import __version__
from budgettune.artifacts.points import point_json, read_point
from budgettune.core import jsonio
from budgettune.core.errors import StorageError, UserError, shorten
from budgettune.core.fields import check_schema, read_json_object
from budgettune.core.files import append_line, make_reserve, storage_error, write_atomic
from budgettune.tune.point import Point

SETTINGS_FILE = "sweep.json"
POINTS_FILE = "points.jsonl"
RESERVE_FILE = ".points-reserve"  # disk space held for the next point's line
POINTS_BYTES = 64 << 20  # points.jsonl: a few kB a budget
SCHEMA_VERSION = 1
# Settings that must match for a resumed sweep to answer the same question.
RESUME_KEYS = ("slo_tbt_s", "slo_ttft_s", "percentile", "engine", "traffic", "model", "gpu")


LOCK_FILE = ".sweep.lock"  # held (flock) by the one process running a sweep in the folder
_HELD: dict[Path, int] = {}  # run folder -> the open lock file's descriptor, for the process


def lock_run_folder(run_dir: Path, *, field: str = "output") -> None:
    """Make this process the one running a sweep in ``run_dir``: an exclusive lock on its lock
    file, held until the process ends (the system drops it then, even on SIGKILL). Raises
    UserError naming the other process's pid when one holds it: two sweeps in one folder would
    both measure every budget and interleave their points and files; ``field`` is the option
    that named the folder. A path that is a file is left to the folder checks."""
    if run_dir.exists() and not run_dir.is_dir():
        return
    key = run_dir.resolve()
    if key in _HELD:
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise storage_error(error, run_dir, field=field) from None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise UserError(
            f"another budgettune (pid {holder}) is running a sweep in {run_dir}",
            field=field,
            hint="wait for it to finish (or stop it), then --resume; or choose another folder",
        ) from None
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode())
    _HELD[key] = descriptor


def holds_sweep(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a sweep's settings or points."""
    return (run_dir / POINTS_FILE).exists() or (run_dir / SETTINGS_FILE).exists()


# What a sweep writes into its run folder: a folder holding any of these (and no sweep.json)
# is refused rather than overwritten; other files (a script, a README) may stay beside a sweep.
SWEEP_WRITES = (
    "results.json", "report.html", "recommendation.json", "vllm.yaml", "sglang.args",
    "trtllm.yaml", "profile.json", POINTS_FILE, SETTINGS_FILE, RESERVE_FILE,
)  # fmt: skip
SWEEP_WRITES_PREFIXES = ("budget-", "engine-")


def writes_here(name: str) -> bool:
    """Whether a sweep writes a file or folder of this name into its run folder."""
    return name in SWEEP_WRITES or name.startswith(SWEEP_WRITES_PREFIXES)


def create_run_folder(run_dir: Path, settings: Mapping[str, object]) -> None:
    """Start a new sweep in ``run_dir`` (its sweep.json, with the schema and budgettune
    versions, written atomically, and the space kept for one point on a disk that fills):
    refuse a folder that already holds a sweep, a file, or a folder holding anything a sweep
    writes (results.json, report.html, budget-N/, ...): nothing budgettune did not write is
    overwritten, while a script or notes beside the sweep may stay."""
    check_new_run_folder(run_dir)
    document = {**settings, "schema_version": SCHEMA_VERSION, "budgettune_version": __version__}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise storage_error(error, run_dir, field="output") from None
    write_atomic(
        run_dir / SETTINGS_FILE, json.dumps(document, indent=2, default=str) + "\n",
        field="output",
    )  # fmt: skip
    make_reserve(run_dir / RESERVE_FILE)


def check_new_run_folder(run_dir: Path) -> None:
    """Refuse, as :func:`create_run_folder` does, a folder a new sweep may not start in."""
    if holds_sweep(run_dir):
        raise UserError(
            f"{run_dir} already holds a sweep",
            field="output",
            hint=f"continue it with --resume {run_dir}, or choose another folder with -o",
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"{run_dir} is a file; -o names a run folder", field="output")
    try:
        held = sorted(entry.name for entry in run_dir.iterdir()) if run_dir.is_dir() else []
    except OSError as error:  # a folder it may not list
        raise storage_error(error, run_dir, field="output") from None
    clashes = [name for name in held if writes_here(name)]
    if clashes:
        raise UserError(
            f"{run_dir} holds {', '.join(clashes[:3])}{' ...' if len(clashes) > 3 else ''} and no"
            " sweep; a sweep would overwrite them",
            field="output",
            hint="choose a new or empty folder with -o",
        )


def read_settings(run_dir: Path) -> Mapping[str, Any]:
    """The sweep.json of the sweep in ``run_dir``; UserError (for --resume) when there is none,
    or its schema_version is missing or not one this budgettune reads."""
    settings_path = run_dir / SETTINGS_FILE
    if not run_dir.exists():
        raise UserError(f"{run_dir} does not exist", field="resume")
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is a file, not a folder; name the run folder", field="resume")
    if not settings_path.is_file():
        raise UserError(f"{run_dir} holds no sweep ({SETTINGS_FILE} is missing)", field="resume")
    try:
        return read_settings_file(settings_path)
    except UserError as error:  # shown as the option that named the folder
        raise UserError(error.message, field="resume", hint=error.hint) from None


def read_settings_file(path: Path) -> Mapping[str, Any]:
    """A sweep.json, its schema_version checked. Raises UserError naming the file."""
    saved = read_json_object(path, "sweep settings")
    check_schema(saved, str(path), SCHEMA_VERSION)
    return saved


def resume_run_folder(run_dir: Path, settings: Mapping[str, object]) -> list[Point]:
    """The finished points of the sweep in ``run_dir``, after checking it asked the same, and
    the space for one more point kept again (StorageError when the disk has none)."""
    saved = read_settings(run_dir)
    for key in RESUME_KEYS:
        if json.dumps(saved.get(key), default=str) != json.dumps(settings.get(key), default=str):
            raise UserError(
                f"{run_dir} was a sweep with {key} = {shorten(repr(saved.get(key)))}, not "
                f"{shorten(repr(settings.get(key)))}",
                field="resume",
                hint="resume with the same options, or start a new sweep with -o",
            )
    points = load_points(run_dir)
    if not (run_dir / RESERVE_FILE).exists():
        make_reserve(run_dir / RESERVE_FILE)
    return points


def load_points(run_dir: Path) -> list[Point]:
    """Every complete line of points.jsonl (a last line cut short by a crash is ignored).
    Raises UserError naming the line and the field of a point that does not validate."""
    path = run_dir / POINTS_FILE
    if not path.exists():
        return []
    data = jsonio.read_bounded(path, POINTS_BYTES, "points")
    lines = jsonio.utf8(data, str(path)).splitlines()
    points = []
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        try:
            value = jsonio.loads(line, where)
        except UserError:
            if number == len(lines) and not data.endswith(b"\n"):
                continue  # the last line of a sweep killed while writing it: no newline yet
            raise
        points.append(read_point(value, where))
    return points


PAIRS_FOLDERS = "seqs-*"  # a two-knob sweep's pairs, one folder per max-num-seqs value


def pair_points_count(run_dir: Path) -> int:
    """The pairs a two-knob sweep's run folder has finished (its ``seqs-S`` folders' points)."""
    return sum(len(load_points(folder)) for folder in sorted(run_dir.glob(PAIRS_FOLDERS)))


def append_point(run_dir: Path, point: Point) -> None:
    """Append one point as one line, fsynced before returning; a line the disk cannot take is
    cut back off, and the space kept for it (:func:`create_run_folder`) used. Raises
    StorageError when the disk is full: after the point is saved if the kept space held it
    (the sweep must stop; --resume finds the point), before otherwise."""
    line = json.dumps(point_json(point), allow_nan=False, default=str)
    used_reserve = append_line(run_dir / POINTS_FILE, line, reserve=run_dir / RESERVE_FILE)
    if used_reserve:
        raise StorageError(
            f"the disk holding {run_dir} is full; the point of budget {point.budget} was saved "
            "in the space kept for it, and the sweep stops",
            path=str(run_dir),
            hint=f"free some space, then continue with --resume {run_dir}",
        )
