"""Adapter for a sweep's run folder: recommendation.json (or, for a sweep still running or
interrupted, sweep.json + points.jsonl), each verified budget's results.json for CDFs, the
workload and the token timeline, into the report's inputs.

A replay the sweep stopped early (its verdict already certain) cancelled its last requests:
those are not failures, its throughput is partial and the SLO it did not decide is unknown.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from budgettune.artifacts.recommendation import (
    RECOMMENDATION_FILE,
    SweepDocument,
    read_recommendation,
    sweep_document_of_results,
    unfinished_document,
)
from budgettune.artifacts.results import Results, load_results, point_records
from budgettune.artifacts.runfolder import (
    POINTS_FILE,
    SETTINGS_FILE,
    load_points,
    pair_points_count,
    read_settings_file,
)
from budgettune.core.errors import UserError
from budgettune.loadgen.runner import LiveRecord
from budgettune.report.inputs import (
    BudgetPoint,
    EngineConfigInput,
    PairCellInput,
    PairGridInput,
    Percentiles,
    Provenance,
    ReportInput,
    SweepInput,
    Verdict,
    cdf_from_samples,
)
from budgettune.report.sources import (
    Slo,
    as_number,
    percentiles_json,
    prompts_fact,
    python_text,
    reason_class,
    relative_path,
    sha256_now,
    slo_checks,
    timeline_from_records,
    with_value,
    workload_from_records,
)
from budgettune.tune.candidates import ridge_text
from budgettune.tune.pair_grid import PairGrid
from budgettune.tune.point import PercentilesMs, Point, Predicted, Status
from budgettune.tune.sweep_config import ModelSourceKind


def is_sweep_folder(path: Path) -> bool:
    return path.is_dir() and any(
        (path / name).is_file() for name in (RECOMMENDATION_FILE, SETTINGS_FILE, POINTS_FILE)
    )


def _records_file(point: Point, run_dir: Path) -> Path | None:
    """The budget's results.json: where the sweep said, else where a moved run folder keeps it."""
    candidates = [Path(point.results_file)] if point.results_file else []
    candidates.append(run_dir / f"budget-{point.budget}" / "results.json")
    return next((p for p in candidates if p.is_file()), None)


def _budget_records(
    point: Point, run_dir: Path, inline: Mapping[int, Sequence[LiveRecord]]
) -> list[LiveRecord]:
    """The budget's measured records: inline (the sweep's results.json) or its replay's file."""
    if point.budget in inline:
        return [live for live in inline[point.budget] if not live.warmup]
    path = _records_file(point, run_dir)
    if path is None:
        return []
    results = load_results(path)
    records: list[LiveRecord] = []
    for raw in results.points:
        records += [live for live in point_records(raw) if not live.warmup]
    return records


def _percentiles(summary: PercentilesMs | None, *, failed: int) -> Percentiles | None:
    if summary is None:
        return None
    keys = ("p50", "p90", "p99", "p999", "max")
    return percentiles_json({key: getattr(summary, key) for key in keys}, failed=failed)


def sweep_point(
    point: Point | None,
    prediction: Predicted | None,
    budget: int,
    *,
    percentile: float,
    run_dir: Path,
    inline: Mapping[int, Sequence[LiveRecord]] | None = None,
) -> BudgetPoint:
    """One budget: the live point (if verified) beside the simulator's prediction."""
    predicted_tbt, predicted_ttft, predicted_thr = _predicted_figures(prediction)
    predicted_hits = None if prediction is None else prediction.prefix_cache_hit_share
    if point is None:
        return BudgetPoint(
            budget_tokens=budget,
            predicted_tbt=predicted_tbt,
            predicted_ttft=predicted_ttft,
            predicted_throughput_tokens_per_s=predicted_thr,
            predicted_cache_hit_share=predicted_hits,
            note="prediction only: not verified live",
        )
    early = point.stopped_early
    if point.status is Status.ENGINE_FAILED:
        return BudgetPoint(
            budget_tokens=budget,
            predicted_tbt=predicted_tbt,
            predicted_ttft=predicted_ttft,
            predicted_throughput_tokens_per_s=predicted_thr,
            predicted_cache_hit_share=predicted_hits,
            error=point.error or "the engine failed to start",
        )
    records = _budget_records(point, run_dir, inline or {})
    measured = point.measured
    failed_reported = 0 if measured is None else measured.failed
    # An early-stopped replay cancelled its last requests on purpose: not failures.
    real_failures = [r.record for r in records if not r.record.ok and not (early and r.cancelled)]
    failed = len(real_failures) if records else (0 if early else failed_reported)
    tbt = _percentiles(
        None if measured is None else measured.tbt, failed=0 if early else failed_reported
    )
    ttft = _percentiles(
        None if measured is None else measured.ttft, failed=0 if early else failed_reported
    )
    # points.jsonl and recommendation.json keep the verdict's own quantiles beside the summary
    # (the sweep's results.json, which flattens the summary into the point, does not): they win.
    if point.tbt_ms is not None:
        tbt = with_value(tbt, percentile, point.tbt_ms)
        ttft_value = point.ttft_ms
        if ttft_value is None and not early and point.is_measured:
            ttft_value = math.inf  # null TTFT of a finished replay: failed requests
        ttft = with_value(ttft, percentile, ttft_value)
    reasons = Counter(reason_class(record.error or "short output") for record in real_failures)
    tbt_samples, ttft_samples = _latency_samples(records, early)
    note = _stop_note(point.stop_message) if early else None
    error = None
    if not point.is_measured:
        error = f"{point.status.text}: {point.error or ''}".strip(": ")
    return BudgetPoint(
        budget_tokens=budget,
        measured_tbt=tbt,
        measured_ttft=ttft,
        predicted_tbt=predicted_tbt,
        predicted_ttft=predicted_ttft,
        throughput_tokens_per_s=None
        if early or measured is None
        else as_number(measured.throughput_tokens_per_s),
        predicted_throughput_tokens_per_s=predicted_thr,
        goodput_per_s=None if point.goodput is None else point.goodput.rate_per_s,
        completed=0 if measured is None else measured.completed,
        failed=failed,
        failure_reasons=dict(reasons),
        passed=point.ok if point.is_measured else False,
        note=note,
        error=error,
        tbt_cdf=cdf_from_samples(tbt_samples * 1e3) if len(tbt_samples) else None,
        ttft_cdf=cdf_from_samples(ttft_samples * 1e3) if len(ttft_samples) else None,
        tbt_interval_ms=point.tbt_ci_ms,
        ttft_interval_ms=point.ttft_ci_ms,
        confidence=None if point.confidence is None else point.confidence.value,
        replays=point.replays,
        round=point.round,
        slot=point.slot,
        cache_hit_share=None if point.prefix_cache is None else point.prefix_cache.hit_share,
        predicted_cache_hit_share=predicted_hits,
    )


def _stop_note(stop_message: str | None) -> str:
    """ "early stop: the p99 TBT verdict is certain (38 gaps ...)" -> its first clause."""
    reason = (stop_message or "").removeprefix("early stop:").split("(")[0].strip()
    return f"stopped early: {reason}" if reason else "stopped early"


def _predicted_figures(
    prediction: Predicted | None,
) -> tuple[Percentiles | None, Percentiles | None, float | None]:
    """The simulator's TBT and TTFT percentiles and throughput at a budget (None: none)."""
    predicted = None if prediction is None else prediction.summary
    if predicted is None:
        return None, None, None
    failed = predicted.failed
    return (
        _percentiles(predicted.tbt, failed=failed),
        _percentiles(predicted.ttft, failed=failed),
        as_number(predicted.throughput_tokens_per_s),
    )


def _latency_samples(
    records: Sequence[LiveRecord], early: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Every gap between two tokens, and every TTFT (inf: no token came), in seconds; requests
    an early stop cancelled before their first token are left out."""
    tbt = np.concatenate(
        [np.diff(r.record.token_times_s) for r in records if len(r.record.token_times_s) > 1]
        or [np.empty(0)]
    )
    ttft = np.array(
        [
            (r.record.token_times_s[0] - r.record.sent_s)
            if len(r.record.token_times_s)
            else math.inf
            for r in records
            if not (early and r.cancelled and not len(r.record.token_times_s))
        ],
        dtype=np.float64,
    )
    return tbt, ttft


def _slo(document: SweepDocument, override: Slo) -> Slo:
    settings = document.settings
    tbt, ttft = document.slo_tbt_ms, document.slo_ttft_ms
    pct = document.percentile or as_number(settings.get("percentile")) or 99.0
    if tbt is None and (tbt_s := as_number(settings.get("slo_tbt_s"))) is not None:
        tbt = tbt_s * 1e3
    if ttft is None and (ttft_s := as_number(settings.get("slo_ttft_s"))) is not None:
        ttft = ttft_s * 1e3
    return Slo(
        tbt_ms=override.tbt_ms if override.tbt_ms is not None else tbt,
        ttft_ms=override.ttft_ms if override.ttft_ms is not None else ttft,
        percentile=pct if override.percentile == 99.0 else override.percentile,
    )


def sweep_input(
    run_dir: Path, *, slo: Slo = Slo(), report_dir: Path | None = None
) -> tuple[ReportInput, Mapping[str, Any]]:
    """The report of a sweep run folder, and the sweep's recorded document (settings and
    candidates, for the profile section the pipeline adds). Raises UserError naming the file."""
    rec_path = run_dir / RECOMMENDATION_FILE
    settings_path = run_dir / SETTINGS_FILE
    if rec_path.is_file():
        document = read_recommendation(rec_path)
        if not document.settings and settings_path.is_file():
            document = _with_settings(document, read_settings_file(settings_path))
    else:
        settings = read_settings_file(settings_path) if settings_path.is_file() else {}
        points = load_points(run_dir)
        if not points:
            pairs = pair_points_count(run_dir)
            if pairs:  # a two-knob sweep keeps its pairs by max-num-seqs value until it ends
                raise UserError(
                    f"report: {run_dir}: the two-knob sweep has finished {pairs} pair(s) "
                    "(budget with max-num-seqs) and writes its page when it ends; resume it "
                    f"with budgettune sweep --resume {run_dir}"
                )
            raise UserError(f"report: {run_dir}: the sweep has no finished budget yet")
        document = unfinished_document(settings, points)
    return _sweep_report(document, run_dir, slo, report_dir, {})


def sweep_document_input(
    document: SweepDocument, run_dir: Path
) -> tuple[ReportInput, Mapping[str, Any]]:
    """The report of a sweep whose document is in hand (the sweep that has just run): the same
    page as :func:`sweep_input` of its folder; each budget's requests are read from the results
    file its replay wrote."""
    return _sweep_report(document, run_dir, Slo(), run_dir, {})


def _with_settings(document: SweepDocument, settings: Mapping[str, Any]) -> SweepDocument:
    return dataclasses.replace(document, settings=settings)


def sweep_results_input(
    results: Results, *, source: Path, slo: Slo = Slo(), report_dir: Path | None = None
) -> tuple[ReportInput, Mapping[str, Any]]:
    """The same report from the sweep's own results.json (every point with its records inline),
    e.g. a file copied away from its run folder."""
    document = sweep_document_of_results(results, source)
    inline = {
        point.budget: point_records(raw)
        for point, raw in zip(document.points, results.points, strict=True)
        if isinstance(raw.get("records"), list)
    }
    return _sweep_report(document, source.parent, slo, report_dir, inline)


def _sweep_report(
    document: SweepDocument,
    run_dir: Path,
    slo: Slo,
    report_dir: Path | None,
    inline: Mapping[int, Sequence[LiveRecord]],
) -> tuple[ReportInput, Mapping[str, Any]]:
    slo = _slo(document, slo)
    settings = document.settings
    by_budget = {point.budget: point for point in document.points}
    predictions = dict(document.predictions)
    for budget, point in by_budget.items():
        if budget not in predictions and point.predicted is not None:
            predictions[budget] = point.predicted
    points = tuple(
        sweep_point(
            by_budget.get(b),
            predictions.get(b),
            b,
            percentile=slo.percentile,
            run_dir=run_dir,
            inline=inline,
        )
        for b in sorted(set(by_budget) | set(predictions))
    )
    rate = document.rate_per_s or as_number(settings.get("rate"))
    sweep = SweepInput(
        points=points,
        slo_tbt_ms=slo.tbt_ms,
        slo_ttft_ms=slo.ttft_ms,
        percentile=slo.percentile,
        rate_per_s=rate,
        recommended_budget=document.budget,
        engine_default_budget=document.default_budget,
    )
    verdict = _verdict(document, sweep, slo)
    best = _timeline_point(by_budget, sweep.recommended_budget)
    records = [r.record for r in _budget_records(best, run_dir, inline)] if best else []
    files = _run_files(run_dir, report_dir, by_budget)
    notes: list[str] = []
    if not document.finished:
        notes.append(
            "The sweep has not finished (no recommendation.json): the page shows the budgets "
            "verified so far. Resume it with budgettune sweep --resume."
        )
    if document.model_source_kind is ModelSourceKind.ANALYTIC:
        notes.append(f"Predictions come from the {document.model_source}.")
    trace = settings.get("trace")
    title_model = settings.get("model") or document.hardware.get("model") or ""
    version = document.budgettune_version or settings.get("budgettune_version") or "?"
    report = ReportInput(
        title=f"budgettune sweep: {title_model}".rstrip(": "),
        kind="sweep",
        verdict=verdict,
        sweep=sweep,
        pairs=None if document.pairs is None else pair_grid_input(document.pairs, slo),
        workload=workload_from_records(records) if records else None,
        timeline=(
            timeline_from_records(records, f"Token timeline, budget {best.budget}", slo.tbt_ms)
            if records and best is not None
            else None
        ),
        provenance=Provenance(
            command=shlex.join(document.command) or None,
            versions=(
                ("budgettune", str(version)),
                *_engine_versions(by_budget),
                ("python", python_text(settings.get("python_version"))),
            ),
            hardware=tuple((str(k), str(v)) for k, v in document.hardware.items()),
            trace=None if trace is None else str(trace),
            trace_sha256=None
            if trace is None
            else (settings.get("trace_sha256") or sha256_now(Path(str(trace)))),
            files=tuple(files),
        ),
        notes=tuple(notes),
        engine_config=engine_config_input(settings, run_dir),
    )
    return report, {**document.raw, "settings": dict(settings)}


# The written answer over the user's file, by the engine that measured it.
WRITTEN_OVER_USER_FILE = ("vllm.yaml", "sglang.yaml")


def engine_config_input(settings: Mapping[str, Any], run_dir: Path) -> EngineConfigInput | None:
    """The user's file as sweep.json recorded it (credentials hidden) and a diff of the written
    answer against it, when the sweep had ``--engine-config`` and wrote one."""
    text = settings.get("engine_config_text")
    if not isinstance(text, str):
        return None
    for name in WRITTEN_OVER_USER_FILE:
        written = run_dir / name
        if written.is_file():
            try:
                after = written.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            diff = difflib.unified_diff(
                text.splitlines(), after.splitlines(), "your engine config", name, lineterm=""
            )
            return EngineConfigInput(text=text, written_name=name, diff=tuple(diff))
    return EngineConfigInput(text=text)


def pair_grid_input(grid: PairGrid, slo: Slo) -> PairGridInput:
    """The two-knob grid for the page: each pair's measured figures where it was launched,
    else the simulator's."""
    cells = tuple(
        PairCellInput(
            budget_tokens=cell.budget,
            max_num_seqs=cell.max_num_seqs,
            tbt_ms=cell.tbt_ms if cell.measured else cell.predicted_tbt_ms,
            ttft_ms=cell.ttft_ms if cell.measured else cell.predicted_ttft_ms,
            measured=cell.measured,
            passed=cell.ok if cell.measured else cell.feasible,
        )
        for cell in grid.cells
    )
    return PairGridInput(
        budgets=grid.budgets,
        seqs_values=grid.seqs_values,
        cells=cells,
        chosen=grid.chosen,
        launches=grid.launches,
        slo_tbt_ms=slo.tbt_ms,
        slo_ttft_ms=slo.ttft_ms,
        percentile=slo.percentile,
    )


def _run_files(
    run_dir: Path, report_dir: Path | None, by_budget: Mapping[int, Point]
) -> list[tuple[str, str]]:
    """The run folder's files the page lists (label, path from the page), those that exist."""
    files = [
        (label, relative_path(run_dir / name, report_dir))
        for label, name in (
            ("recommendation", RECOMMENDATION_FILE),
            ("every verified point, one per line", POINTS_FILE),
            ("sweep settings", SETTINGS_FILE),
            ("vLLM config", "vllm.yaml"),
            ("SGLang arguments", "sglang.args"),
            ("TensorRT-LLM options", "trtllm.yaml"),
            ("every point with its raw per-request records", "results.json"),
        )
        if (run_dir / name).is_file()
    ]
    for budget, point in sorted(by_budget.items()):
        path = _records_file(point, run_dir)
        if path is not None:
            files.append(
                (f"budget {budget}: raw per-request records", relative_path(path, report_dir))
            )
    return files


def _engine_versions(by_budget: Mapping[int, Point]) -> tuple[tuple[str, str], ...]:
    for point in by_budget.values():
        engine = point.engine or {}
        if engine.get("name"):
            out = [("engine", f"{engine['name']} {engine.get('version') or ''}".strip())]
            launch = engine.get("command")
            if isinstance(launch, list) and launch:
                out.append(("engine command (one budget)", shlex.join(str(a) for a in launch)))
            return tuple(out)
    return ()


def _timeline_point(by_budget: Mapping[int, Point], recommended: int | None) -> Point | None:
    """The recommended budget's replay, else the first fully measured one."""
    if recommended is not None and recommended in by_budget:
        return by_budget[recommended]
    finished = [p for _, p in sorted(by_budget.items()) if p.is_measured]
    full = [p for p in finished if not p.stopped_early]
    chosen = full or finished
    return chosen[0] if chosen else None


def _verdict(document: SweepDocument, sweep: SweepInput, slo: Slo) -> Verdict:
    best = next((p for p in sweep.points if p.budget_tokens == sweep.recommended_budget), None)
    pct = f"p{slo.percentile:g}"
    facts: list[tuple[str, str]] = []
    if slo.tbt_ms is not None:
        facts.append(("TBT SLO", f"{pct} <= {slo.tbt_ms:g} ms"))
    if slo.ttft_ms is not None:
        facts.append(("TTFT SLO", f"{pct} <= {slo.ttft_ms:g} ms"))
    if sweep.rate_per_s is not None:
        facts.append(("load", f"{sweep.rate_per_s:.3g} requests/s: {document.traffic or ''}"))
    prompts = prompts_fact(document.settings.get("prompt_form"))
    if prompts is not None:
        facts.append(prompts)
    name = document.engine_name or document.settings.get("engine")
    if name:
        facts.append(("engine", str(name)))
    if sweep.engine_default_budget is not None:
        default = next(
            (p for p in sweep.points if p.budget_tokens == sweep.engine_default_budget), None
        )
        verdict = (
            ""
            if default is None or default.passed is None
            else (": meets both SLOs" if default.passed else ": breaks an SLO")
        )
        facts.append(("engine default budget", f"{sweep.engine_default_budget}{verdict}"))
    if document.candidate_budgets:
        facts.append(
            (
                "candidates",
                ", ".join(str(b) for b in document.candidate_budgets)
                + f" ({ridge_text(document.ridge_tokens, document.knee_found)}, expected "
                f"decode batch {document.decode_batch or 0:.3g})",
            )
        )
    if document.launches is not None:
        facts.append(("engine launches", f"{document.launches} in {document.wall_s or 0:.3g} s"))
    if not document.finished:
        measured = sum(1 for p in sweep.points if p.passed is not None)
        return Verdict(
            headline=f"Sweep not finished: {measured} budget(s) verified so far",
            facts=tuple(facts),
        )
    headline = document.headline or "No recommendation recorded"
    checks = (
        slo_checks(best.measured_tbt, best.measured_ttft, slo)
        if best is not None and best.measured_tbt is not None
        else ()
    )
    return Verdict(
        headline=headline,
        details=document.reasons,
        checks=checks,
        facts=tuple(facts),
        ok=sweep.recommended_budget is not None,
    )


__all__ = ["is_sweep_folder", "sweep_input", "sweep_point", "sweep_results_input"]
