"""Typed sweep points at the file boundary: save -> load -> equal, the documents of
reports/example read back to the same JSON, and one-line errors naming the file and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from budgettune.artifacts.points import flat_point_json, point_json, read_point, summary_json
from budgettune.artifacts.recommendation import read_recommendation
from budgettune.artifacts.results import load_results
from budgettune.artifacts.runfolder import append_point, load_points
from budgettune.core.errors import UserError
from budgettune.core.metrics import summarize
from budgettune.core.records import RequestRecord
from budgettune.tune.point import (
    AtSlo,
    Goodput,
    GoodputProbe,
    PercentilesMs,
    Point,
    Predicted,
    Role,
    Status,
    StopReason,
    SummaryMs,
)
from budgettune.tune.sweep_config import ModelSourceKind

EXAMPLE = Path(__file__).resolve().parents[2] / "reports" / "example"


def _summary(p99_ms: float | None, failed: int = 0) -> SummaryMs:
    metric = PercentilesMs(1.5, 2.0, p99_ms, None, 30.25)
    return SummaryMs(metric, metric, metric, metric, 1234.5, 150 - failed, failed)


PREDICTED = Predicted(_summary(22.5), tbt_at_slo_ms=22.5, ttft_at_slo_ms=None, decode_batch=11.2)

POINTS = [
    Point(
        budget=768, role=Role.CANDIDATE, rate_per_s=7.2133, predicted=PREDICTED,
        status=Status.MEASURED, measured=_summary(22.6), tbt_ms=22.6, ttft_ms=272.4,
        tbt_ok=True, ttft_ok=True, ok=True, complete=True, engine={"name": "sim", "pid": 1},
        results_file="run/budget-768/results.json", selfcheck={"sent": 150}, wall_s=26.8,
        goodput=Goodput(9.5, False, (
            GoodputProbe(8.0, True, 20.0, 250.0, AtSlo(19.0, None), 0),
            GoodputProbe(16.0, False, None, None, None, 3),
        )),
    ),
    Point(
        budget=1024, role=Role.CANDIDATE, rate_per_s=7.2133, predicted=None,
        status=Status.MEASURED, measured=_summary(None, failed=2), tbt_ms=31.0, ttft_ms=None,
        tbt_ok=False, ttft_ok=True, ok=False, complete=False, wall_s=3.0,
        stopped_by=StopReason.EARLY_STOP,
        stop_message="early stop: the p99 TBT verdict is certain (38 gaps above the TBT SLO)",
    ),
    Point(
        budget=2048, role=Role.CANDIDATE, rate_per_s=7.2133, predicted=PREDICTED,
        status=Status.ABORTED, measured=_summary(40.0, failed=60), tbt_ms=40.0, ttft_ms=None,
        tbt_ok=None, ttft_ok=None, ok=False, complete=False, wall_s=2.0,
        stopped_by=StopReason.ERROR_RATE, error="aborted: 12 of 20 finished requests failed",
    ),
    Point(
        budget=8192, role=Role.REFERENCE, rate_per_s=7.2133, predicted=PREDICTED,
        status=Status.ENGINE_FAILED, tbt_ok=None, ttft_ok=None, ok=False, wall_s=0.5,
        error="engine exited with status 1", log_tail="CUDA out of memory",
    ),
]  # fmt: skip


def test_points_round_trip_through_points_jsonl(tmp_path: Path) -> None:
    for point in POINTS:
        append_point(tmp_path, point)
    assert load_points(tmp_path) == POINTS


def test_points_round_trip_through_the_flat_results_shape() -> None:
    # results.json keeps the summary at the top level (its tbt_ms/ttft_ms are the percentile
    # objects); the verdict's own quantiles and intervals stay in "measured" (*_at_slo_*)
    for point in POINTS:
        flat = json.loads(json.dumps(flat_point_json(point)))
        back = read_point(flat, "results.json")
        assert back.measured == point.measured and back.status is point.status
        assert back.stopped_by is point.stopped_by and back.goodput == point.goodput
        assert (back.tbt_ms, back.ttft_ms) == (point.tbt_ms, point.ttft_ms)
        assert (back.tbt_ci_ms, back.ttft_ci_ms) == (point.tbt_ci_ms, point.ttft_ci_ms)
        assert back.confidence is point.confidence and back.replays == point.replays
        if point.measured is not None:
            assert flat["measured"]["tbt_at_slo_ms"] == point.tbt_ms


def test_the_example_documents_read_back_to_the_same_json() -> None:
    lines = (EXAMPLE / "points.jsonl").read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        point = read_point(json.loads(line), f"points.jsonl:{number}")
        assert json.dumps(point_json(point)) == line  # same keys, same order, same values
    document = read_recommendation(EXAMPLE / "recommendation.json")
    raw = json.loads((EXAMPLE / "recommendation.json").read_text())
    assert [point_json(p) for p in document.points] == raw["points"]
    assert document.budget == raw["budget"] == 768
    assert document.model_source_kind is ModelSourceKind.ANALYTIC  # read from the legacy prose
    results = load_results(EXAMPLE / "results.json")
    for index, raw_point in enumerate(results.points):
        point = read_point(raw_point, f"results.json: points[{index}]")
        flat = flat_point_json(point)
        assert {k: v for k, v in raw_point.items() if k != "records"} == flat


def test_an_early_stopped_point_carries_its_outcome_as_fields() -> None:
    point = POINTS[1]
    assert point.stopped_early and point.is_measured
    assert not POINTS[2].stopped_early and POINTS[2].stopped_by is StopReason.ERROR_RATE
    assert point_json(point)["early_stop"] == point.stop_message


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"budget": "x"}, "points.jsonl:3: field 'budget': expected a whole number, got 'x'"),
        ({"status": "gone"}, "points.jsonl:3: field 'status': expected one of measured, "),
        ({"ok": None}, "points.jsonl:3: field 'ok': expected true or false, got None"),
        ({"measured": {"tbt_ms": {}}}, "points.jsonl:3: field 'measured.ttft_ms' is missing"),
        ({"role": 3}, "points.jsonl:3: field 'role': expected text, got 3"),
    ],
)
def test_a_bad_point_names_the_line_and_the_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    lines = [json.dumps(point_json(point)) for point in POINTS[:3]]
    lines[2] = json.dumps({**json.loads(lines[2]), **change})
    (tmp_path / "points.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError) as caught:
        load_points(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / message}")
    assert "\n" not in str(caught.value)


def test_a_last_line_cut_short_by_a_crash_is_ignored(tmp_path: Path) -> None:
    append_point(tmp_path, POINTS[0])
    with open(tmp_path / "points.jsonl", "a") as handle:
        handle.write('{"budget": 10')
    assert load_points(tmp_path) == POINTS[:1]


def test_recommendation_json_schema_is_checked(tmp_path: Path) -> None:
    raw = json.loads((EXAMPLE / "recommendation.json").read_text())
    path = tmp_path / "recommendation.json"
    for version, message in (
        ("1", "field 'schema_version': expected a whole number, got '1'"),
        (99, "field 'schema_version': 99 is newer than this budgettune reads (1)"),
    ):
        path.write_text(json.dumps({**raw, "schema_version": version}))
        with pytest.raises(UserError) as caught:
            read_recommendation(path)
        assert str(caught.value) == f"{path}: {message}"
    path.write_text(json.dumps({**raw, "slo": {**raw["slo"], "tbt_ms": "25ms"}}))
    with pytest.raises(UserError, match=r"field 'slo\.tbt_ms': expected a number, got '25ms'"):
        read_recommendation(path)


def test_a_typed_summary_writes_what_metrics_summary_writes() -> None:
    records = [
        RequestRecord(0, 10, 3, 0.0, 0.0, np.array([0.05, 0.06, 0.09])),
        RequestRecord(1, 10, 3, 0.1, 0.1, np.array([0.2]), error="timeout"),  # +inf figures
    ]
    for summary in (summarize(records), summarize([])):  # with failures; with no sample at all
        assert summary_json(SummaryMs.of(summary)) == summary.to_json()
