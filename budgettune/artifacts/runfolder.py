"""The sweep's run folder: its settings, and every finished point appended at once.

``sweep.json`` holds what the sweep was asked (so ``--resume`` can refuse a different question);
``points.jsonl`` gets one line per finished budget the moment it finishes, so a crash or Ctrl-C
loses at most the point in progress, and a resumed sweep re-runs nothing that finished.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from budgettune.core.errors import UserError

SETTINGS_FILE = "sweep.json"
POINTS_FILE = "points.jsonl"
# Settings that must match for a resumed sweep to answer the same question.
RESUME_KEYS = ("slo_tbt_s", "slo_ttft_s", "percentile", "engine", "traffic", "model", "gpu")


def create_run_folder(run_dir: Path, settings: dict[str, Any]) -> None:
    """Start a new sweep in ``run_dir``: refuse one that already holds a sweep."""
    if (run_dir / POINTS_FILE).exists() or (run_dir / SETTINGS_FILE).exists():
        raise UserError(
            f"-o: {run_dir} already holds a sweep",
            hint=f"continue it with --resume {run_dir}, or choose another folder with -o",
        )
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, default=str) + "\n")
    except OSError as exc:
        raise UserError(f"-o: cannot write to {run_dir}: {exc.strerror or exc}") from None


def read_settings(run_dir: Path) -> dict[str, Any]:
    """The sweep.json of the sweep in ``run_dir``; UserError (for --resume) when there is none."""
    settings_path = run_dir / SETTINGS_FILE
    if not run_dir.is_dir():
        raise UserError(f"--resume: {run_dir} does not exist")
    if not settings_path.is_file():
        raise UserError(f"--resume: {run_dir} holds no sweep ({SETTINGS_FILE} is missing)")
    try:
        saved = json.loads(settings_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"--resume: cannot read {settings_path}: {exc}") from None
    if not isinstance(saved, dict):
        raise UserError(f"--resume: {settings_path} is not a sweep's settings (not an object)")
    return saved


def resume_run_folder(run_dir: Path, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """The finished points of the sweep in ``run_dir``, after checking it asked the same."""
    saved = read_settings(run_dir)
    for key in RESUME_KEYS:
        if json.dumps(saved.get(key), default=str) != json.dumps(settings.get(key), default=str):
            raise UserError(
                f"--resume: {run_dir} was a sweep with {key} = {saved.get(key)!r}, "
                f"not {settings.get(key)!r}",
                hint="resume with the same options, or start a new sweep with -o",
            )
    return load_points(run_dir)


def load_points(run_dir: Path) -> list[dict[str, Any]]:
    """Every complete line of points.jsonl (a line cut short by a crash is ignored)."""
    path = run_dir / POINTS_FILE
    if not path.exists():
        return []
    points = []
    for line in path.read_text().splitlines():
        try:
            points.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the last line of a sweep killed while writing it
    return points


def append_point(run_dir: Path, point: dict[str, Any]) -> None:
    """Append one point as one line, flushed to disk before returning."""
    with open(run_dir / POINTS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(point, allow_nan=False, default=str) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
