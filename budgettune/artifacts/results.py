"""Self-describing, versioned results (``results.json``): schema version, budgettune version,
engine and hardware, the full command configuration, and every point with its summary and raw
per-request records, so reports can be rebuilt from the file alone. Only this module and
:mod:`budgettune.report` write files, and only to the paths they are given.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from budgettune import __version__
from budgettune.core import jsonio
from budgettune.core.errors import UserError
from budgettune.core.fields import Fields, check_schema, read_json_object
from budgettune.core.files import atomic_writer, check_overwrite, json_document_ours, make_folder
from budgettune.core.limits import MAX_TOKENS
from budgettune.loadgen.runner import LiveRecord

SCHEMA_VERSION = 1
RESULTS_FILE = "results.json"
KINDS = ("replay", "sweep", "simulate")  # the commands that write a results.json


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
            _check_records(Fields(point, source, f"points[{index}]."))
        command = data.get("command") or []
        if not isinstance(command, list):
            fields.fail("command", "a list", command)
        kind = fields.text("kind")
        if kind not in KINDS:
            fields.fail("kind", "one of " + ", ".join(KINDS), kind)
        return cls(
            kind=kind,
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


def _check_records(point: Fields) -> None:
    """Each per-request record as budgettune writes one: token counts in [1, MAX_TOKENS] (an
    output of 0 tokens too), and times finite and not before the run's start (0 s). A report
    built from anything else would draw numbers no run measured (1e999 reads as Infinity)."""
    if not point.has("records"):
        return
    for index, item in enumerate(point.items("records")):
        name = f"records[{index}]"
        if not isinstance(item, Mapping):
            point.fail(name, "an object", item)
        record = Fields(item, point.where, f"{point.prefix}{name}.")
        record.integer("prompt_tokens", minimum=1, maximum=MAX_TOKENS)
        record.integer("output_tokens", minimum=0, maximum=MAX_TOKENS)
        record.number("target_s", minimum=0.0)
        record.number("sent_s", minimum=0.0)
        times = record.items("token_times_s") if record.has("token_times_s") else []
        try:
            values = np.asarray(times, dtype=np.float64)
        except (TypeError, ValueError):
            record.fail("token_times_s", "a list of numbers", times)
        bad = np.flatnonzero(~np.isfinite(values) | (values < 0))
        if values.ndim != 1 or len(bad):
            at = int(bad[0]) if values.ndim == 1 else 0
            record.fail(f"token_times_s[{at}]", "a finite time of at least 0 s", times[at])


def _copy(fields: Fields, name: str) -> dict[str, Any] | None:
    value = fields.mapping_or_none(name)
    return None if value is None else dict(value)


def point_records(point: Mapping[str, Any]) -> list[LiveRecord]:
    """The raw per-request records of one point, as objects."""
    return [LiveRecord.from_json(item) for item in point.get("records", [])]


def results_path(path: Path) -> Path:
    """``path`` itself when it names a .json file, else ``path / results.json`` (a folder whose
    name ends in .json included: replay's and simulate's -o is a folder whatever its name)."""
    return path if path.suffix == ".json" and not path.is_dir() else path / RESULTS_FILE


def save_results(results: Results, path: Path) -> Path:
    """Write ``results`` to ``path`` (a folder, created if needed, or a .json file) atomically
    (temporary file, fsync, rename: a crash or a full disk never leaves half a file), over a
    file budgettune wrote only. Returns the file written. Raises UserError when the location
    cannot be written or holds someone else's file, StorageError when the disk is full."""
    target = results_path(path)
    check_overwrite(target, json_document_ours, field="output")
    make_folder(target.parent, field="output")
    with atomic_writer(target, field="output") as handle:
        json.dump(results.to_json(), handle, allow_nan=False, separators=(",", ":"))
        handle.write("\n")
    return target


def load_results(path: Path) -> Results:
    """Read a results file (or the results.json in a folder). Raises UserError naming the file
    when it is missing, not JSON, or of an unknown schema."""
    target = results_path(path)
    data = read_json_object(target, "results", max_bytes=jsonio.RESULTS_BYTES)
    return Results.from_json(data, source=str(target))
