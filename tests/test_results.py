"""results.json: the save/load round trip, schema checks, and the atomic write."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from budgettune import __version__
from budgettune.artifacts.results import (
    SCHEMA_VERSION,
    Results,
    load_results,
    point_records,
    save_results,
)
from budgettune.core.errors import UserError
from budgettune.core.records import RequestRecord
from budgettune.loadgen.runner import LiveRecord


def _results() -> Results:
    ok = RequestRecord(0, 120, 3, 0.0, 0.0004, np.array([0.05, 0.06, 0.0725]))
    bad = RequestRecord(1, 90, 4, 0.1, 0.1002, np.array([0.2]), error="stream cut after 1 tokens")
    merged = RequestRecord(2, 10, 3, 0.2, 0.2001, np.array([0.3, 0.35, 0.4]), merged_chunks=1)
    lives = [
        LiveRecord(ok, 200, ok.token_times_s, np.ones(3, dtype=np.int64), {"completion_tokens": 3}),
        LiveRecord(bad, 200, bad.token_times_s, np.ones(1, dtype=np.int64)),
        LiveRecord(merged, 200, np.array([0.3, 0.4]), np.array([1, 2]), warmup=True),
    ]
    return Results(
        kind="replay",
        config={"budget": 512, "rate": 8.0, "trace": None},
        points=[{"budget": 512, "completed": 2, "records": [r.to_json() for r in lives]}],
        command=["budgettune", "replay", "--budget", "512"],
        engine={"name": "sim", "version": __version__, "pid": 123},
        hardware={"gpu": "h100-sxm", "model": "llama-3.1-8b"},
        complete=False,
        incomplete_reason="interrupted (Ctrl-C): partial results",
    )


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    original = _results()
    written = save_results(original, tmp_path / "run")
    assert written == tmp_path / "run" / "results.json"
    assert [p.name for p in written.parent.iterdir()] == ["results.json"]  # no temp file left
    loaded = load_results(tmp_path / "run")
    assert loaded.to_json() == original.to_json()
    assert loaded.schema_version == SCHEMA_VERSION and loaded.budgettune_version == __version__
    records = point_records(loaded.points[0])
    assert [r.record.ok for r in records] == [True, False, True]
    assert records[0].record.token_times_s.tolist() == [0.05, 0.06, 0.0725]
    assert records[1].record.error == "stream cut after 1 tokens"
    assert records[2].chunk_tokens.tolist() == [1, 2] and records[2].warmup
    assert records[0].usage == {"completion_tokens": 3}


def test_save_to_a_json_file_path_and_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "custom.json"
    save_results(_results(), target)
    second = _results()
    second.complete = True
    second.incomplete_reason = None
    save_results(second, target)
    assert load_results(target).complete


def test_load_refuses_unknown_and_newer_schemas(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such results file"):
        load_results(tmp_path / "missing")
    path = tmp_path / "results.json"
    path.write_text("{not json")
    with pytest.raises(UserError, match=r"results\.json: not valid JSON"):
        load_results(path)
    path.write_text(json.dumps({"schema_version": 1, "kind": "banana", "config": {}, "points": []}))
    with pytest.raises(UserError, match="field 'kind': expected one of replay, sweep, simulate"):
        load_results(path)
    path.write_text(json.dumps({"kind": "replay"}))
    with pytest.raises(UserError, match="no schema_version"):
        load_results(path)
    document = _results().to_json()
    document["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match="newer than this budgettune reads"):
        load_results(path)
    del document["points"]
    document["schema_version"] = SCHEMA_VERSION
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match="'points' is missing"):
        load_results(path)


def test_unwritable_location_is_a_user_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match=r"^output: cannot write"):
        save_results(_results(), blocker / "run")


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("prompt_tokens", -5, "'points[0].records[0].prompt_tokens': expected at least 1, got -5"),
        ("prompt_tokens", 1 << 25, "prompt_tokens': expected at most 16,777,216"),
        ("output_tokens", 2.5, "output_tokens': expected a whole number"),
        ("sent_s", -1.0, "'points[0].records[0].sent_s': expected at least 0.0, got -1.0"),
        ("target_s", 1e999, "target_s': expected a finite number, got inf"),  # JSON's 1e999
        ("token_times_s", [0.1, 1e999], "token_times_s[1]': expected a finite time of at least 0"),
        ("token_times_s", [-0.5], "token_times_s[0]': expected a finite time of at least 0"),
        ("token_times_s", ["soon"], "token_times_s': expected a list of numbers"),
    ],
)
def test_load_refuses_records_no_run_could_write(
    tmp_path: Path, field: str, value: object, says: str
) -> None:
    """A report is built from the records: one that no run measured fails in one line naming
    the file and the field, before any figure is drawn."""
    doc = _results().to_json()
    doc["points"][0]["records"][0][field] = value  # type: ignore[index]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc).replace("Infinity", "1e999"))
    with pytest.raises(UserError) as caught:
        load_results(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: field ") and says in message, message
