"""Sweep run folders: a hand-built folder (interrupted sweep, an engine failure, an early-stopped
replay whose cancellations are not failures) and a real embedded-engine sweep rebuilt into a page
from its folder and from its results.json alone."""

from __future__ import annotations

import hashlib
import json
import math
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from budgettune.app.report import build_input
from budgettune.artifacts.results import Results, save_results
from budgettune.artifacts.runfolder import append_point
from budgettune.core.records import RequestRecord
from budgettune.loadgen.runner import LiveRecord
from budgettune.tune.point import (
    PercentilesMs,
    Point,
    Predicted,
    Role,
    Status,
    StopReason,
    SummaryMs,
)


def _live(record: RequestRecord) -> dict:
    # written without the ``cancelled`` field, as before it existed: the reader tells a
    # cancellation from the client's "cancelled after N tokens" (the legacy path)
    times = record.token_times_s
    return LiveRecord(record, 200, times, np.ones(len(times), dtype=np.int64)).to_json()


def _write_budget_results(run_dir: Path, budget: int, records: list[RequestRecord]) -> Path:
    results = Results(
        kind="replay",
        config={},
        points=[{"budget": budget, "records": [_live(r) for r in records]}],
    )
    return save_results(results, run_dir / f"budget-{budget}")


def _summary(tbt_p99: float | None, ttft_p99: float | None, failed: int) -> SummaryMs:
    def metric(p50: float | None, p99: float | None) -> PercentilesMs:
        return PercentilesMs(p50=p50, p90=None, p99=p99, p999=None, max=None)

    ttft = metric(None if ttft_p99 is None else ttft_p99 / 2, ttft_p99)
    none = metric(None, None)
    return SummaryMs(ttft, metric(5.0, tbt_p99), none, none, 900.0, 10, failed)


def _predicted(tbt_p99: float, ttft_p99: float) -> Predicted:
    return Predicted(_summary(tbt_p99, ttft_p99, 0), tbt_p99, ttft_p99, decode_batch=4.0)


@pytest.fixture
def partial_run(tmp_path: Path) -> Path:
    """sweep.json + points.jsonl only: 512 passed; 1024 stopped early on TBT with 3 requests
    cancelled and 1 real timeout; 2048's engine never started."""
    run = tmp_path / "run"
    run.mkdir()
    settings = {"slo_tbt_s": 0.03, "slo_ttft_s": 1.0, "percentile": 99.0, "model": "m"}
    (run / "sweep.json").write_text(json.dumps({**settings, "schema_version": 1}))
    ok = [RequestRecord(i, 100, 3, 0.1 * i, 0.1 * i, 0.1 * i + np.array([0.05, 0.06, 0.08]))
          for i in range(4)]  # fmt: skip
    cut = [
        RequestRecord(0, 100, 3, 0.0, 0.0, np.array([0.05, 0.09, 0.13])),
        RequestRecord(1, 100, 3, 0.1, 0.1, np.array([0.2]), error="cancelled after 1 tokens"),
        RequestRecord(2, 100, 3, 0.2, 0.2, np.array([]), error="cancelled after 0 tokens"),
        RequestRecord(3, 100, 3, 0.3, 0.3, np.array([0.4]), error="cancelled after 1 tokens"),
        RequestRecord(4, 100, 3, 0.4, 0.4, np.array([]), error="timeout after 300s"),
    ]
    common: dict[str, Any] = {"role": Role.CANDIDATE, "rate_per_s": 10.0, "wall_s": 1.0}
    points = [
        Point(
            budget=512, status=Status.MEASURED, ok=True, tbt_ok=True, ttft_ok=True,
            tbt_ms=20.0, ttft_ms=80.0, measured=_summary(20.0, 80.0, 0), complete=True,
            predicted=_predicted(18.0, 90.0),
            results_file=str(_write_budget_results(run, 512, ok)), **common,
        ),
        Point(
            budget=1024, status=Status.MEASURED, ok=False, tbt_ok=False, ttft_ok=True,
            tbt_ms=40.0, ttft_ms=None, measured=_summary(40.0, None, 4),
            stopped_by=StopReason.EARLY_STOP,
            stop_message="early stop: the p99 TBT verdict is certain (9 gaps above the TBT SLO)",
            predicted=_predicted(35.0, 70.0),
            results_file=str(_write_budget_results(run, 1024, cut)), **common,
        ),
        Point(
            budget=2048, status=Status.ENGINE_FAILED, ok=False, tbt_ok=None, ttft_ok=None,
            error="engine exited with code 1", predicted=None, **common,
        ),
    ]  # fmt: skip
    for point in points:
        append_point(run, point)
    with open(run / "points.jsonl", "a") as handle:
        handle.write('{"cut')  # a sweep killed while it wrote its last line
    return run


def test_interrupted_sweep_folder(partial_run: Path) -> None:
    report = build_input(partial_run, report_dir=partial_run)
    assert report.kind == "sweep"
    assert report.verdict is not None
    assert report.verdict.headline == "Sweep not finished: 2 budget(s) verified so far"
    assert report.sweep is not None and report.sweep.slo_tbt_ms == pytest.approx(30.0)
    points = {p.budget_tokens: p for p in report.sweep.points}
    assert set(points) == {512, 1024, 2048}
    good, cut, failed = points[512], points[1024], points[2048]
    assert good.passed is True and good.measured_tbt is not None
    assert good.measured_tbt.at(99) == 20.0 and good.predicted_tbt is not None
    assert good.throughput_tokens_per_s == 900.0
    # early stop: the 3 cancellations are not failures, the timeout is; throughput withheld;
    # the TTFT the replay never decided is unknown, not infinite
    assert cut.failed == 1 and cut.failure_reasons == {"timeout after": 1}
    assert cut.throughput_tokens_per_s is None
    assert cut.note == "stopped early: the p99 TBT verdict is certain"
    assert cut.measured_ttft is not None and cut.measured_ttft.at(99) is None
    assert cut.tbt_cdf is not None and len(cut.tbt_cdf.values_ms) == 2  # the one full request
    assert failed.error == "engine exited with code 1" and failed.passed is None
    assert any("has not finished" in n for n in report.notes)
    assert report.timeline is not None  # 512, the first fully measured replay
    assert [r.request_id for r in report.timeline.requests] == [0, 1, 2, 3]


def test_finished_ttft_null_means_failures(partial_run: Path) -> None:
    lines = (partial_run / "points.jsonl").read_text().splitlines()
    point = json.loads(lines[0])
    point.update(ttft_ms=None, ok=False, ttft_ok=False)
    point["measured"].update(ttft_at_slo_ms=None, ttft_at_slo_ci_ms=None)
    (partial_run / "points.jsonl").write_text(json.dumps(point) + "\n")
    report = build_input(partial_run)
    assert report.sweep is not None
    (only,) = report.sweep.points
    assert only.measured_ttft is not None and only.measured_ttft.at(99) == math.inf


@pytest.mark.slow
@pytest.mark.xdist_group("sweep-run")  # with the browser's test of the same sweep
def test_real_sweep_page(sweep_run: Path, budgettune_cmd: list[str], tmp_path: Path) -> None:
    rec = json.loads((sweep_run / "recommendation.json").read_text())
    written = (sweep_run / "report.html").read_text()  # by the sweep, from what it held in memory
    done = subprocess.run(
        [*budgettune_cmd, "report", str(sweep_run)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    page = (sweep_run / "report.html").read_text()
    # `report` rebuilds the sweep's own page from its files, byte for byte: nothing the sweep
    # knew is missing from the folder, nothing the folder says differs from what it knew
    assert page == written
    assert rec["choice"]["headline"].replace("<=", "&lt;=") in page
    for chart_id in ("chart-profile", "chart-tbt-vs-budget", "chart-ttft-cdf", "chart-timeline"):
        assert f'id="{chart_id}"' in page
    assert '<a href="vllm.yaml">' in page and '<a href="results.json">' in page
    # the same page from the sweep's results.json alone, written elsewhere: links climb back
    elsewhere = tmp_path / "pages" / "sweep.html"
    done = subprocess.run(
        [*budgettune_cmd, "report", str(sweep_run / "results.json"), "-o", str(elsewhere)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    copy = elsewhere.read_text()
    assert rec["choice"]["headline"].replace("<=", "&lt;=") in copy
    assert "../../" in copy and 'href="/' not in copy
    charts = [sorted(set(re.findall(r'id="(chart-[a-z-]+)"', text))) for text in (page, copy)]
    assert charts[0] == charts[1]


def test_sweep_provenance_python_and_trace_checksum(partial_run: Path) -> None:
    """Recorded values win; without them the page says the figure is of now, not of the run."""
    trace = partial_run / "t.jsonl"
    trace.write_text('{"prompt_tokens": 10, "output_tokens": 2}\n')
    settings = json.loads((partial_run / "sweep.json").read_text())
    (partial_run / "sweep.json").write_text(json.dumps({**settings, "trace": str(trace)}))
    prov = build_input(partial_run).provenance
    versions = dict(prov.versions)
    assert versions["python"] == f"{platform.python_version()} (now)"
    digest = hashlib.sha256(trace.read_bytes()).hexdigest()
    assert prov.trace_sha256 == f"{digest} (of the file now at that path)"
    recorded = {**settings, "trace": str(trace), "python_version": "3.12.1", "trace_sha256": "ab"}
    (partial_run / "sweep.json").write_text(json.dumps(recorded))
    prov = build_input(partial_run).provenance
    assert dict(prov.versions)["python"] == "3.12.1" and prov.trace_sha256 == "ab"
