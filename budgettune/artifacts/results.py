"""Self-describing, versioned results (``results.json``): schema version, budgettune version,
engine and hardware, the full command configuration, and every point with its summary and raw
per-request records, so reports can be rebuilt from the file alone. Only this module and
:mod:`budgettune.report` write files, and only to the paths they are given.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgettune import __version__
from budgettune.core.errors import UserError
from budgettune.loadgen.runner import LiveRecord

SCHEMA_VERSION = 1
RESULTS_FILE = "results.json"


@dataclass(slots=True)
class Results:
    """One command's results.

    kind: "replay", "sweep", ...; command: the argv as typed; config: every option's value after
    parsing (what is needed to rerun it); engine: name, version, url, budget, launch command,
    log path, crash if any; hardware: GPU and model shape when known; points: one JSON object
    per measured (budget, rate), each holding ``records`` (see :class:`LiveRecord.to_json`).
    complete False marks an interrupted or aborted run, with the reason.
    """

    kind: str
    config: dict[str, Any]
    points: list[dict[str, Any]]
    command: list[str] = field(default_factory=list)
    engine: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    complete: bool = True
    incomplete_reason: str | None = None
    schema_version: int = SCHEMA_VERSION
    budgettune_version: str = __version__
    created_utc: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "budgettune_version": self.budgettune_version,
            "kind": self.kind,
            "created_utc": self.created_utc,
            "complete": self.complete,
            "incomplete_reason": self.incomplete_reason,
            "command": list(self.command),
            "config": self.config,
            "engine": self.engine,
            "hardware": self.hardware,
            "points": self.points,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, source: str = "results") -> Results:
        """Rebuild from a parsed document. Raises UserError for a newer or missing schema."""
        version = data.get("schema_version")
        if not isinstance(version, int):
            raise UserError(f"{source}: not a budgettune results file (no schema_version)")
        if version > SCHEMA_VERSION:
            raise UserError(
                f"{source}: schema_version {version} is newer than this budgettune reads "
                f"({SCHEMA_VERSION})",
                hint="upgrade budgettune",
            )
        for key in ("kind", "config", "points"):
            if key not in data:
                raise UserError(f"{source}: field {key!r} is missing")
        return cls(
            kind=str(data["kind"]),
            config=dict(data["config"]),
            points=list(data["points"]),
            command=list(data.get("command") or []),
            engine=data.get("engine"),
            hardware=data.get("hardware"),
            complete=bool(data.get("complete", True)),
            incomplete_reason=data.get("incomplete_reason"),
            schema_version=version,
            budgettune_version=str(data.get("budgettune_version", "unknown")),
            created_utc=str(data.get("created_utc", "")),
        )


def point_records(point: dict[str, Any]) -> list[LiveRecord]:
    """The raw per-request records of one point, as objects."""
    return [LiveRecord.from_json(item) for item in point.get("records", [])]


def results_path(path: Path) -> Path:
    """``path`` itself when it names a .json file, else ``path / results.json``."""
    return path if path.suffix == ".json" else path / RESULTS_FILE


def save_results(results: Results, path: Path) -> Path:
    """Write ``results`` to ``path`` (a folder, created if needed, or a .json file) atomically
    (temporary file + rename, so a crash never leaves half a file). Returns the file written.
    Raises UserError when the location cannot be written."""
    target = results_path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(results.to_json(), handle, allow_nan=False, separators=(",", ":"))
            handle.write("\n")
        os.replace(tmp, target)
    except OSError as exc:
        raise UserError(f"-o: cannot write {target}: {exc.strerror or exc}") from None
    return target


def load_results(path: Path) -> Results:
    """Read a results file (or the results.json in a folder). Raises UserError naming the file
    when it is missing, not JSON, or of an unknown schema."""
    target = results_path(path)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{target}: no such results file") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"{target}: cannot read results: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{target}: not a budgettune results file")
    return Results.from_json(data, source=str(target))
