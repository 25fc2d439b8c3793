"""The sweep's run folder: its settings (``sweep.json``) and every finished point
(``points.jsonl``), each written and read here only, validated on read.

``sweep.json`` holds what the sweep was asked (so ``--resume`` can refuse a different question);
``points.jsonl`` gets one line per finished budget the moment it finishes, so a crash or Ctrl-C
loses at most the point in progress, and a resumed sweep re-runs nothing that finished.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budgettune import __version__
from budgettune.artifacts.fields import check_schema, read_json_object
from budgettune.artifacts.points import point_json, read_point
from budgettune.core.errors import UserError
from budgettune.tune.point import Point

SETTINGS_FILE = "sweep.json"
POINTS_FILE = "points.jsonl"
SCHEMA_VERSION = 1
# Settings that must match for a resumed sweep to answer the same question.
RESUME_KEYS = ("slo_tbt_s", "slo_ttft_s", "percentile", "engine", "traffic", "model", "gpu")


def holds_sweep(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a sweep's settings or points."""
    return (run_dir / POINTS_FILE).exists() or (run_dir / SETTINGS_FILE).exists()


def create_run_folder(run_dir: Path, settings: Mapping[str, object]) -> None:
    """Start a new sweep in ``run_dir`` (its sweep.json, with the schema and budgettune
    versions): refuse one that already holds a sweep."""
    if holds_sweep(run_dir):
        raise UserError(
            f"{run_dir} already holds a sweep",
            field="output",
            hint=f"continue it with --resume {run_dir}, or choose another folder with -o",
        )
    document = {**settings, "schema_version": SCHEMA_VERSION, "budgettune_version": __version__}
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / SETTINGS_FILE).write_text(json.dumps(document, indent=2, default=str) + "\n")
    except OSError as exc:
        raise UserError(
            f"cannot write to {run_dir}: {exc.strerror or exc}", field="output"
        ) from None


def read_settings(run_dir: Path) -> Mapping[str, Any]:
    """The sweep.json of the sweep in ``run_dir``; UserError (for --resume) when there is none,
    or its schema_version is missing or not one this budgettune reads."""
    settings_path = run_dir / SETTINGS_FILE
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} does not exist", field="resume")
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
    """The finished points of the sweep in ``run_dir``, after checking it asked the same."""
    saved = read_settings(run_dir)
    for key in RESUME_KEYS:
        if json.dumps(saved.get(key), default=str) != json.dumps(settings.get(key), default=str):
            raise UserError(
                f"{run_dir} was a sweep with {key} = {saved.get(key)!r}, not {settings.get(key)!r}",
                field="resume",
                hint="resume with the same options, or start a new sweep with -o",
            )
    return load_points(run_dir)


def load_points(run_dir: Path) -> list[Point]:
    """Every complete line of points.jsonl (a last line cut short by a crash is ignored).
    Raises UserError naming the line and the field of a point that does not validate."""
    path = run_dir / POINTS_FILE
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    points = []
    for number, line in enumerate(lines, start=1):
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                continue  # the last line of a sweep killed while writing it
            raise UserError(f"{path}:{number}: not a JSON line") from None
        points.append(read_point(data, f"{path}:{number}"))
    return points


def append_point(run_dir: Path, point: Point) -> None:
    """Append one point as one line, flushed to disk before returning."""
    with open(run_dir / POINTS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(point_json(point), allow_nan=False, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
