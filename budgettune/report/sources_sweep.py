"""Adapter for a sweep's run folder: recommendation.json (or, for a sweep still running or
interrupted, sweep.json + points.jsonl), each verified budget's results.json for CDFs, the
workload and the token timeline, into the report's inputs.

A replay the sweep stopped early (its verdict already certain) cancelled its last requests:
those are not failures, its throughput is partial and the SLO it did not decide is unknown.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from budgettune.artifacts.results import Results, load_results, point_records
from budgettune.core.errors import UserError
from budgettune.core.records import RequestRecord
from budgettune.report.inputs import (
    BudgetPoint,
    Provenance,
    ReportInput,
    SweepInput,
    Verdict,
    cdf_from_samples,
)
from budgettune.report.sources import (
    Slo,
    as_mapping,
    as_number,
    percentiles_json,
    python_text,
    read_json,
    reason_class,
    relative_path,
    sha256_now,
    slo_checks,
    timeline_from_records,
    with_value,
    workload_from_records,
)

RECOMMENDATION_FILE = "recommendation.json"
SETTINGS_FILE = "sweep.json"
POINTS_FILE = "points.jsonl"


def is_sweep_folder(path: Path) -> bool:
    return path.is_dir() and any(
        (path / name).is_file() for name in (RECOMMENDATION_FILE, SETTINGS_FILE, POINTS_FILE)
    )


def _load_points(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / POINTS_FILE
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(item, dict):
            out.append(item)
    return out


def _records_file(point: Mapping[str, Any], run_dir: Path) -> Path | None:
    """The budget's results.json: where the sweep said, else where a moved run folder keeps it."""
    named = point.get("results_file")
    candidates = [Path(str(named))] if named else []
    candidates.append(run_dir / f"budget-{point.get('budget')}" / "results.json")
    return next((p for p in candidates if p.is_file()), None)


def _budget_records(point: Mapping[str, Any], run_dir: Path) -> list[RequestRecord]:
    """The budget's measured records: inline (the sweep's results.json) or its replay's file."""
    if isinstance(point.get("records"), list):
        return [live.record for live in point_records(dict(point)) if not live.warmup]
    path = _records_file(point, run_dir)
    if path is None:
        return []
    results = load_results(path)
    records: list[RequestRecord] = []
    for raw in results.points:
        records += [live.record for live in point_records(raw) if not live.warmup]
    return records


def _cancelled(record: RequestRecord) -> bool:
    return (record.error or "").startswith("cancelled")


def sweep_point(
    point: Mapping[str, Any] | None,
    prediction: Mapping[str, Any] | None,
    budget: int,
    *,
    percentile: float,
    run_dir: Path,
) -> BudgetPoint:
    """One budget: the live point (if verified) beside the simulator's prediction."""
    predicted_failed = int(as_number((prediction or {}).get("failed")) or 0)
    predicted_tbt = percentiles_json((prediction or {}).get("tbt_ms"), failed=predicted_failed)
    predicted_ttft = percentiles_json((prediction or {}).get("ttft_ms"), failed=predicted_failed)
    predicted_thr = as_number((prediction or {}).get("throughput_tokens_per_s"))
    if point is None:
        return BudgetPoint(
            budget_tokens=budget,
            predicted_tbt=predicted_tbt,
            predicted_ttft=predicted_ttft,
            predicted_throughput_tokens_per_s=predicted_thr,
            note="prediction only: not verified live",
        )
    status = str(point.get("status", "measured"))
    early = point.get("early_stop")
    if status == "engine_failed":
        return BudgetPoint(
            budget_tokens=budget,
            predicted_tbt=predicted_tbt,
            predicted_ttft=predicted_ttft,
            predicted_throughput_tokens_per_s=predicted_thr,
            error=str(point.get("error") or "the engine failed to start"),
        )
    records = _budget_records(point, run_dir)
    # points.jsonl nests the replay's summary under "measured" beside the verdict's quantiles
    # (floats); the sweep's results.json flattens it into the point (percentile objects).
    nested = "measured" in point
    measured = as_mapping(point.get("measured")) if nested else point
    failed_reported = int(as_number(measured.get("failed")) or 0)
    # An early-stopped replay cancelled its last requests on purpose: not failures.
    real_failures = [r for r in records if not r.ok and not (early and _cancelled(r))]
    failed = len(real_failures) if records else (0 if early else failed_reported)
    tbt = percentiles_json(measured.get("tbt_ms"), failed=0 if early else failed_reported)
    ttft = percentiles_json(measured.get("ttft_ms"), failed=0 if early else failed_reported)
    if nested:  # the point's own quantiles are the numbers the verdict used: they win
        tbt = with_value(tbt, percentile, as_number(point.get("tbt_ms")))
        ttft_value = as_number(point.get("ttft_ms"))
        if ttft_value is None and not early and status == "measured":
            ttft_value = math.inf  # null TTFT of a finished replay: failed requests
        ttft = with_value(ttft, percentile, ttft_value)
    reasons: dict[str, int] = {}
    for record in real_failures:
        key = reason_class(record.error or "short output")
        reasons[key] = reasons.get(key, 0) + 1
    tbt_samples = np.concatenate(
        [np.diff(r.token_times_s) for r in records if len(r.token_times_s) > 1] or [np.empty(0)]
    )
    ttft_samples = np.array(
        [
            (r.token_times_s[0] - r.sent_s) if len(r.token_times_s) else math.inf
            for r in records
            if not (early and _cancelled(r) and not len(r.token_times_s))
        ],
        dtype=np.float64,
    )
    note = None
    if early:  # "early stop: the p99 TBT verdict is certain (38 gaps ...)" -> its first clause
        reason = str(early).removeprefix("early stop:").split("(")[0].strip()
        note = f"stopped early: {reason}" if reason else "stopped early"
    error = None
    if status != "measured":
        error = f"{status.replace('_', ' ')}: {point.get('error') or ''}".strip(": ")
    return BudgetPoint(
        budget_tokens=budget,
        measured_tbt=tbt,
        measured_ttft=ttft,
        predicted_tbt=predicted_tbt,
        predicted_ttft=predicted_ttft,
        throughput_tokens_per_s=None
        if early
        else as_number(measured.get("throughput_tokens_per_s")),
        predicted_throughput_tokens_per_s=predicted_thr,
        goodput_per_s=as_number(point.get("goodput_rate")),
        completed=int(as_number(measured.get("completed")) or 0),
        failed=failed,
        failure_reasons=reasons,
        passed=bool(point.get("ok")) if status == "measured" else False,
        note=note,
        error=error,
        tbt_cdf=cdf_from_samples(tbt_samples * 1e3) if len(tbt_samples) else None,
        ttft_cdf=cdf_from_samples(ttft_samples * 1e3) if len(ttft_samples) else None,
    )


def _slo(doc: Mapping[str, Any], settings: Mapping[str, Any], override: Slo) -> Slo:
    recorded = as_mapping(doc.get("slo"))
    tbt = as_number(recorded.get("tbt_ms"))
    ttft = as_number(recorded.get("ttft_ms"))
    pct = as_number(recorded.get("percentile")) or as_number(settings.get("percentile")) or 99.0
    if tbt is None and as_number(settings.get("slo_tbt_s")) is not None:
        tbt = float(settings["slo_tbt_s"]) * 1e3
    if ttft is None and as_number(settings.get("slo_ttft_s")) is not None:
        ttft = float(settings["slo_ttft_s"]) * 1e3
    return Slo(
        tbt_ms=override.tbt_ms if override.tbt_ms is not None else tbt,
        ttft_ms=override.ttft_ms if override.ttft_ms is not None else ttft,
        percentile=pct if override.percentile == 99.0 else override.percentile,
    )


def sweep_input(
    run_dir: Path, *, slo: Slo = Slo(), report_dir: Path | None = None
) -> tuple[ReportInput, dict[str, Any]]:
    """The report of a sweep run folder, and the sweep's recorded document (settings and
    candidates, for the profile section the pipeline adds). Raises UserError naming the file."""
    rec_path = run_dir / RECOMMENDATION_FILE
    doc: dict[str, Any] = {}
    if rec_path.is_file():
        loaded = read_json(rec_path)
        if not isinstance(loaded, dict) or loaded.get("kind") != "sweep":
            raise UserError(f"{rec_path}: not a budgettune sweep recommendation")
        doc = loaded
    settings = as_mapping(doc.get("settings"))
    if not settings and (run_dir / SETTINGS_FILE).is_file():
        settings = as_mapping(read_json(run_dir / SETTINGS_FILE))
    listed = doc.get("points")
    raw_points: list[Any] = listed if isinstance(listed, list) else _load_points(run_dir)
    if not raw_points and not doc:
        raise UserError(f"report: {run_dir}: the sweep has no finished budget yet")
    return _sweep_report(doc, settings, raw_points, run_dir, slo, report_dir)


def sweep_results_input(
    results: Results, *, source: Path, slo: Slo = Slo(), report_dir: Path | None = None
) -> tuple[ReportInput, dict[str, Any]]:
    """The same report from the sweep's own results.json (every point with its records inline),
    e.g. a file copied away from its run folder."""
    config = dict(results.config)
    summary = as_mapping(config.pop("sweep", None))
    doc = {
        **summary,
        "command": list(results.command),
        "budgettune_version": results.budgettune_version,
    }
    if not summary:
        raise UserError(f"{source}: a sweep results file without its 'sweep' summary in config")
    return _sweep_report(doc, config, list(results.points), source.parent, slo, report_dir)


def _sweep_report(
    doc: dict[str, Any],
    settings: Mapping[str, Any],
    raw_points: list[Any],
    run_dir: Path,
    slo: Slo,
    report_dir: Path | None,
) -> tuple[ReportInput, dict[str, Any]]:
    slo = _slo(doc, settings, slo)
    by_budget = {
        int(p["budget"]): p
        for p in raw_points
        if isinstance(p, Mapping) and as_number(p.get("budget")) is not None
    }
    predictions = {
        int(k): v for k, v in as_mapping(doc.get("predictions")).items() if str(k).isdigit()
    }
    for budget, point in by_budget.items():
        if budget not in predictions and isinstance(point.get("predicted"), Mapping):
            predictions[budget] = point["predicted"]
    points = tuple(
        sweep_point(
            by_budget.get(b), predictions.get(b), b, percentile=slo.percentile, run_dir=run_dir
        )
        for b in sorted(set(by_budget) | set(predictions))
    )
    engine = as_mapping(doc.get("engine"))
    default = as_number(engine.get("default_budget"))
    recommended = as_number(doc.get("budget"))
    load = as_mapping(doc.get("load"))
    rate = as_number(load.get("rate_per_s")) or as_number(settings.get("rate"))
    sweep = SweepInput(
        points=points,
        slo_tbt_ms=slo.tbt_ms,
        slo_ttft_ms=slo.ttft_ms,
        percentile=slo.percentile,
        rate_per_s=rate,
        recommended_budget=None if recommended is None else int(recommended),
        engine_default_budget=None if default is None else int(default),
    )
    verdict = _verdict(doc, sweep, slo, settings, engine, load)
    best = _timeline_point(by_budget, sweep.recommended_budget)
    records = _budget_records(best, run_dir) if best is not None else []
    files = [
        (label, relative_path(run_dir / name, report_dir))
        for label, name in (
            ("recommendation", RECOMMENDATION_FILE),
            ("every verified point, one per line", POINTS_FILE),
            ("sweep settings", SETTINGS_FILE),
            ("vLLM config", "vllm.yaml"),
            ("SGLang arguments", "sglang.args"),
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
    notes: list[str] = []
    if not doc:
        notes.append(
            "The sweep has not finished (no recommendation.json): the page shows the budgets "
            "verified so far. Resume it with budgettune sweep --resume."
        )
    source = str(doc.get("model_source") or "")
    if source.startswith("analytic"):
        notes.append(f"Predictions come from the {source}.")
    trace = settings.get("trace")
    title_model = settings.get("model") or as_mapping(doc.get("hardware")).get("model") or ""
    report = ReportInput(
        title=f"budgettune sweep: {title_model}".rstrip(": "),
        kind="sweep",
        verdict=verdict,
        sweep=sweep,
        workload=workload_from_records(records) if records else None,
        timeline=(
            timeline_from_records(records, f"Token timeline, budget {best['budget']}", slo.tbt_ms)
            if records and best is not None
            else None
        ),
        provenance=Provenance(
            command=shlex.join(str(a) for a in doc.get("command") or []) or None,
            versions=(
                (
                    "budgettune",
                    str(doc.get("budgettune_version") or settings.get("budgettune_version") or "?"),
                ),
                *_engine_versions(by_budget),
                ("python", python_text(settings.get("python_version"))),
            ),
            hardware=tuple((str(k), str(v)) for k, v in as_mapping(doc.get("hardware")).items()),
            trace=None if trace is None else str(trace),
            trace_sha256=None
            if trace is None
            else (settings.get("trace_sha256") or sha256_now(Path(str(trace)))),
            files=tuple(files),
        ),
        notes=tuple(notes),
    )
    return report, {**doc, "settings": dict(settings)}


def _engine_versions(by_budget: Mapping[int, Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    for point in by_budget.values():
        engine = as_mapping(point.get("engine"))
        if engine.get("name"):
            out = [("engine", f"{engine['name']} {engine.get('version') or ''}".strip())]
            launch = engine.get("command")
            if isinstance(launch, list) and launch:
                out.append(("engine command (one budget)", shlex.join(str(a) for a in launch)))
            return tuple(out)
    return ()


def _timeline_point(
    by_budget: Mapping[int, Mapping[str, Any]], recommended: int | None
) -> Mapping[str, Any] | None:
    """The recommended budget's replay, else the first fully measured one."""
    if recommended is not None and recommended in by_budget:
        return by_budget[recommended]
    finished = [p for _, p in sorted(by_budget.items()) if p.get("status") == "measured"]
    full = [p for p in finished if not p.get("early_stop")]
    chosen = full or finished
    return chosen[0] if chosen else None


def _verdict(
    doc: Mapping[str, Any],
    sweep: SweepInput,
    slo: Slo,
    settings: Mapping[str, Any],
    engine: Mapping[str, Any],
    load: Mapping[str, Any],
) -> Verdict:
    choice = as_mapping(doc.get("choice"))
    best = next((p for p in sweep.points if p.budget_tokens == sweep.recommended_budget), None)
    pct = f"p{slo.percentile:g}"
    facts: list[tuple[str, str]] = []
    if slo.tbt_ms is not None:
        facts.append(("TBT SLO", f"{pct} <= {slo.tbt_ms:g} ms"))
    if slo.ttft_ms is not None:
        facts.append(("TTFT SLO", f"{pct} <= {slo.ttft_ms:g} ms"))
    if sweep.rate_per_s is not None:
        facts.append(("load", f"{sweep.rate_per_s:.3g} requests/s: {load.get('traffic') or ''}"))
    name = engine.get("name") or settings.get("engine")
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
    cands = as_mapping(doc.get("candidates"))
    if cands.get("budgets"):
        facts.append(
            (
                "candidates",
                ", ".join(str(b) for b in cands["budgets"])
                + f" (ridge P* {float(cands.get('ridge_tokens') or 0):.0f} tokens, expected "
                f"decode batch {float(cands.get('decode_batch') or 0):.3g})",
            )
        )
    if doc.get("launches") is not None:
        facts.append(
            ("engine launches", f"{doc.get('launches')} in {float(doc.get('wall_s') or 0):.3g} s")
        )
    if not doc:
        measured = sum(1 for p in sweep.points if p.passed is not None)
        return Verdict(
            headline=f"Sweep not finished: {measured} budget(s) verified so far",
            facts=tuple(facts),
        )
    headline = str(choice.get("headline") or "No recommendation recorded")
    reasons = tuple(str(r) for r in choice.get("reasons") or ())
    checks = (
        slo_checks(best.measured_tbt, best.measured_ttft, slo)
        if best is not None and best.measured_tbt is not None
        else ()
    )
    return Verdict(
        headline=headline,
        details=reasons,
        checks=checks,
        facts=tuple(facts),
        ok=sweep.recommended_budget is not None,
    )


__all__ = ["is_sweep_folder", "sweep_input", "sweep_point", "sweep_results_input"]
