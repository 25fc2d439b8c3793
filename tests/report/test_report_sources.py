"""Adapters: simulate --json, a replay's results (hand-built records with known metrics), and
profiles (the fitted two-segment curve is rebuilt exactly from what the file keeps)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from report_builders import SIM_DOC

from budgettune.app.profile import ProfileConfig, run_profile
from budgettune.app.report import build_input, detect_kind, profile_page
from budgettune.artifacts.results import Results, save_results
from budgettune.core import metrics
from budgettune.core.errors import UserError
from budgettune.core.records import RequestRecord
from budgettune.loadgen.runner import LiveRecord
from budgettune.model.fit import fit_ridge
from budgettune.model.profile import EngineInfo, Probe, Profile
from budgettune.report.sources import Slo, results_input, simulate_input
from budgettune.report.sources_profile import profile_curve, profile_input


def test_simulate_doc_judged_against_the_slos() -> None:
    report = simulate_input(SIM_DOC, slo=Slo(tbt_ms=50.0, ttft_ms=1000.0))
    sweep = report.sweep
    assert sweep is not None
    verdicts = {p.budget_tokens: p.passed for p in sweep.points}
    # 256: TTFT 1.5 s > 1 s; 512 and 1024 pass; 2048: TBT 60 > 50; 4096: failures -> inf
    assert verdicts == {256: False, 512: True, 1024: True, 2048: False, 4096: False, None: False}
    assert sweep.recommended_budget == 1024
    assert sweep.feasible_interval() == (512, 1024)
    failing = next(p for p in sweep.points if p.budget_tokens == 4096)
    assert failing.predicted_tbt is not None and failing.predicted_tbt.at(99) == math.inf
    goodput = {p.budget_tokens: p.goodput_per_s for p in sweep.points}
    assert goodput[512] == 21.5 and goodput[None] == 4.0 and goodput[1024] is None
    assert report.verdict is not None and report.verdict.ok is True
    assert "1024" in report.verdict.headline
    assert [c.passed for c in report.verdict.checks] == [True, True]
    assert all(p.measured_tbt is None for p in sweep.points)  # predictions, not measurements


def test_simulate_without_slo_judges_nothing() -> None:
    report = simulate_input(SIM_DOC)
    assert report.sweep is not None
    assert all(p.passed is None for p in report.sweep.points)
    assert report.verdict is not None and report.verdict.ok is None


@pytest.mark.parametrize(
    "doc",
    [{"points": []}, {"points": "x"}, {"points": [{"budget": -5}]}, {"points": [{"budget": 1.5}]}],
)
def test_bad_simulate_doc_names_the_field(doc: dict) -> None:
    with pytest.raises(UserError, match=r"points|budget"):
        simulate_input(doc, source="sim.json")


def _records() -> list[LiveRecord]:
    def live(record: RequestRecord, status: int = 200) -> LiveRecord:
        times = record.token_times_s
        return LiveRecord(record, status, times, np.ones(len(times), dtype=np.int64))

    return [
        live(RequestRecord(0, 100, 3, 0.0, 0.001, np.array([0.1, 0.12, 0.15]))),
        live(RequestRecord(1, 200, 2, 0.5, 0.5, np.array([0.7, 0.75]))),
        live(RequestRecord(2, 300, 4, 1.0, 1.0, np.array([1.2]), error="http 500: boom"), 500),
    ]


def _results(records: list[LiveRecord], *, with_summary: bool) -> Results:
    point: dict = {"budget": 512, "rate": 2.0, "records": [r.to_json() for r in records]}
    if with_summary:
        point.update(metrics.summarize([r.record for r in records]).to_json())
    return Results(
        kind="replay",
        config={"model": "<b>m</b>", "rate": 2.0},
        points=[point],
        command=["budgettune", "replay", "--budget", "512"],
        engine={"name": "sim", "version": "0.1.0", "command": ["python", "-m", "x"]},
        hardware={"gpu": "h100-sxm"},
    )


@pytest.mark.parametrize("with_summary", [True, False])
def test_replay_results_figures_match_the_metrics(with_summary: bool) -> None:
    records = _records()
    report = results_input(_results(records, with_summary=with_summary), slo=Slo(50.0, 1000.0))
    assert report.sweep is not None
    (point,) = report.sweep.points
    expected = metrics.summarize([r.record for r in records])
    assert point.budget_tokens == 512
    assert point.completed == 2 and point.failed == 1
    assert point.failure_reasons == {"http 500": 1}
    assert point.measured_tbt is not None and point.measured_ttft is not None
    assert point.measured_tbt.at(50) == pytest.approx(expected.tbt_s.p50 * 1e3)
    # one of three requests failed: p99 TTFT is infinite, the TTFT SLO fails
    assert point.measured_ttft.at(99) == math.inf
    assert point.passed is False
    assert report.verdict is not None and report.verdict.ok is False
    assert [c.passed for c in report.verdict.checks] == [True, False]
    # the CDFs hold every sample (3 TBT gaps; 3 TTFTs of which one infinite stays off the line)
    assert point.tbt_cdf is not None and len(point.tbt_cdf.values_ms) == 3
    assert point.ttft_cdf is not None and point.ttft_cdf.fraction[-1] == pytest.approx(2 / 3)
    assert report.workload is not None
    assert report.workload.prompt_tokens.tolist() == [100, 200, 300]
    assert report.timeline is not None
    assert [r.failed for r in report.timeline.requests] == [False, False, True]
    assert report.provenance.command == "budgettune replay --budget 512"
    assert ("engine", "sim 0.1.0") in report.provenance.versions


def test_results_file_round_trip_through_build_input(tmp_path: Path) -> None:
    path = save_results(_results(_records(), with_summary=True), tmp_path / "run")
    report = build_input(tmp_path / "run", slo=Slo(tbt_ms=50.0), report_dir=tmp_path / "run")
    assert report.kind == "replay"
    assert ("results (raw per-request records)", "results.json") in report.provenance.files
    assert path.name == "results.json"


def test_detect_kind() -> None:
    assert detect_kind(SIM_DOC) == "simulate"
    assert detect_kind({"schema_version": 1, "kind": "replay", "points": []}) == "results"
    assert detect_kind({"probes": [], "model": {}}) == "profile"
    for doc in ({}, [], {"points": 3}, "text"):
        with pytest.raises(UserError, match="cannot tell what this file is"):
            detect_kind(doc)


@pytest.fixture(scope="module")
def analytic(tmp_path_factory: pytest.TempPathFactory) -> Profile:
    out = tmp_path_factory.mktemp("profile") / "p.json"
    config = ProfileConfig(model="llama-3.1-8b", engine="analytic", gpu_name="h100-sxm", output=out)
    return run_profile(config).profile


def test_hinge_curve_is_rebuilt_exactly(analytic: Profile) -> None:
    knee, a, s1, s2 = 300.0, 4e-3, 1e-6, 2e-5

    def truth(tokens: np.ndarray) -> np.ndarray:
        return a + s1 * tokens + (s2 - s1) * np.maximum(tokens - knee, 0.0)

    sizes = [64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 2048, 4096]
    probes = tuple(
        Probe("prefill", n, 0, 0, tuple(float(truth(np.array(n))) * f for f in (0.99, 1.0, 1.01)))
        for n in sizes
    )
    ridge = fit_ridge(probes, rng=np.random.default_rng(0), bootstrap=0)
    assert ridge.knee_found and ridge.knee_tokens == pytest.approx(knee, rel=0.02)
    profile = dataclasses.replace(analytic, kind="measured", probes=probes, ridge=ridge)
    curve = profile_curve(profile)
    assert curve is not None and curve.fit_tokens is not None and curve.fit_ms is not None
    assert curve.fit_ms == pytest.approx(truth(curve.fit_tokens) * 1e3, rel=0.02)
    assert curve.median_ms.tolist() == pytest.approx(
        [float(truth(np.array(n))) * 1e3 for n in sizes]
    )
    assert curve.lo_ms is not None and curve.lo_ms[0] == pytest.approx(curve.median_ms[0] * 0.99)


def test_analytic_profile_is_labelled_model_output(analytic: Profile) -> None:
    section = profile_input([analytic], floor_tokens=512, ceilings_tokens={50.0: 1536})
    assert section.curves[0].measured is False
    assert section.knee_note is not None and "not a measurement" in section.knee_note
    assert section.ridge_tokens == pytest.approx(analytic.ridge.knee_tokens)  # type: ignore[union-attr]
    assert [t.round_tokens for t in section.tile_probes] == [256, 512]
    assert section.fit_errors == {}  # the model fitting itself proves nothing


def test_profile_provenance_names_python_and_the_engine_command(analytic: Profile) -> None:
    assert "engine command" not in dict(profile_page(analytic).provenance.versions)
    launch = ["vllm", "serve", "m", "--max-num-batched-tokens", "2304"]
    measured = dataclasses.replace(
        analytic, engine=EngineInfo("vllm", "0.9", {"command": launch, "python_version": "3.12"})
    )
    versions = dict(profile_page(measured).provenance.versions)
    assert versions["engine command"] == "vllm serve m --max-num-batched-tokens 2304"
    assert versions["python"] == "3.12"
