"""Self-describing, versioned results (``results.json``): schema version, budgettune version,
engine and hardware, the full command configuration, and every point with its summary and raw
per-request records, so reports can be rebuilt from the file alone. Only this module and
:mod:`budgettune.report` write files, and only to the paths they are given.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgettune import __version__
from budgettune.artifacts.fields import Fields, check_schema, read_json_object
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

    def to_json(self) -> dict[str, object]:
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
    def from_json(cls, data: Mapping[str, Any], *, source: str = "results") -> Results:
        """Rebuild from a parsed document, validated field by field. Raises UserError naming
        ``source`` and the field (a missing, non-integer or newer schema_version included)."""
        if "schema_version" not in data:
            raise UserError(f"{source}: not a budgettune results file (no schema_version)")
        version = check_schema(data, source, SCHEMA_VERSION)
        fields = Fields(data, source)
        config = fields.child("config").data
        points = fields.items("points")
        for index, point in enumerate(points):
            if not isinstance(point, Mapping):
                fields.fail(f"points[{index}]", "an object", point)
        command = data.get("command") or []
        if not isinstance(command, list):
            fields.fail("command", "a list", command)
        return cls(
            kind=fields.text("kind"),
            config=dict(config),
            points=[dict(point) for point in points],
            command=[str(arg) for arg in command],
            engine=_copy(fields, "engine"),
            hardware=_copy(fields, "hardware"),
            complete=True if data.get("complete") is None else fields.flag("complete"),
            incomplete_reason=fields.text_or_none("incomplete_reason"),
            schema_version=version,
            budgettune_version=str(data.get("budgettune_version", "unknown")),
            created_utc=str(data.get("created_utc", "")),
        )


def _copy(fields: Fields, name: str) -> dict[str, Any] | None:
    value = fields.mapping_or_none(name)
    return None if value is None else dict(value)


def point_records(point: Mapping[str, Any]) -> list[LiveRecord]:
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
        raise UserError(f"cannot write {target}: {exc.strerror or exc}", field="output") from None
    return target


def load_results(path: Path) -> Results:
    """Read a results file (or the results.json in a folder). Raises UserError naming the file
    when it is missing, not JSON, or of an unknown schema."""
    target = results_path(path)
    return Results.from_json(read_json_object(target, "results"), source=str(target))
