"""Adapters: read each result file kind (replay results.json, ``simulate --json`` output) into
the report's inputs; profiles in :mod:`.sources_profile`. A schema change touches one adapter.

Every reader raises :class:`~budgettune.core.errors.UserError` naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from budgettune.artifacts.results import Results, point_records
from budgettune.core import jsonio, metrics
from budgettune.core.errors import UserError
from budgettune.core.records import RequestRecord
from budgettune.core.slo import SLO
from budgettune.core.units import format_ms
from budgettune.loadgen.selfcheck import PROMPT_FORM_WORDS, prompts_text
from budgettune.report.inputs import (
    BudgetPoint,
    Check,
    Percentiles,
    Provenance,
    ReportInput,
    SweepInput,
    TimelineInput,
    TimelineRequest,
    Verdict,
    WorkloadInput,
    cdf_from_samples,
)


@dataclass(slots=True, frozen=True)
class Slo:
    """SLOs to judge and draw against, milliseconds; ``percentile`` is the one they constrain."""

    tbt_ms: float | None = None
    ttft_ms: float | None = None
    percentile: float = 99.0

    def rule(self) -> SLO | None:
        """These targets as the one SLO judgement (:class:`~budgettune.core.slo.SLO`), a target
        not given never broken; None when neither is given."""
        if self.tbt_ms is None and self.ttft_ms is None:
            return None
        return SLO(
            tbt_s=math.inf if self.tbt_ms is None else self.tbt_ms / 1e3,
            ttft_s=math.inf if self.ttft_ms is None else self.ttft_ms / 1e3,
            percentile=self.percentile,
        )


def recorded_slo(config: Mapping[str, Any], slo: Slo) -> Slo:
    """``slo`` when the caller gave one, else the SLOs the run recorded (``slo_tbt_s``,
    ``slo_ttft_s`` and ``percentile`` in its config: simulate --goodput, replay --slo-*)."""
    if slo.tbt_ms is not None or slo.ttft_ms is not None:
        return slo
    tbt_s, ttft_s = as_number(config.get("slo_tbt_s")), as_number(config.get("slo_ttft_s"))
    percentile = as_number(config.get("percentile"))
    return Slo(
        tbt_ms=None if tbt_s is None else tbt_s * 1e3,
        ttft_ms=None if ttft_s is None else ttft_s * 1e3,
        percentile=slo.percentile if percentile is None else percentile,
    )


def as_number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def percentiles_json(data: object, *, failed: int = 0) -> Percentiles | None:
    """A ``{"p50": .., "p99": .., "max": ..}`` object in ms. JSON cannot hold +inf, so a null
    percentile of a run with failures is read back as +inf (failures count as violations)."""
    if not isinstance(data, Mapping):
        return None
    fixed: dict[str, object] = {}
    for key, value in data.items():
        if value is None and failed > 0:
            fixed[str(key)] = math.inf
        else:
            fixed[str(key)] = value
    summary = Percentiles.from_keys(fixed)
    return summary if summary.values_ms else None


def _budget(value: object, *, source: str) -> int | None:
    if value is None or value == "none":
        return None
    number = as_number(value)
    if number is None or number <= 0 or number != int(number):
        raise UserError(
            f"{source}: field 'budget': expected a positive whole number or null, got {value!r}"
        )
    return int(number)


def _judge(tbt: Percentiles | None, ttft: Percentiles | None, slo: Slo) -> bool | None:
    """Both SLOs met at the percentile; None when there is no SLO or no figure to judge."""
    checks = slo_checks(tbt, ttft, slo)
    if not checks or any(check.value_ms is None for check in checks):
        return None
    return all(check.passed for check in checks)


def slo_checks(tbt: Percentiles | None, ttft: Percentiles | None, slo: Slo) -> tuple[Check, ...]:
    """One line per SLO given: the figure at the percentile against its target, judged by
    :meth:`SLO.judge_at` (the one SLO judgement); a missing figure does not pass."""
    rule = slo.rule()
    if rule is None:
        return ()
    tbt_ms = None if tbt is None else tbt.at(slo.percentile)
    ttft_ms = None if ttft is None else ttft.at(slo.percentile)
    judgement = rule.judge_at(
        math.nan if tbt_ms is None else tbt_ms / 1e3, math.nan if ttft_ms is None else ttft_ms / 1e3
    )
    pct = f"p{slo.percentile:g}"
    out = []
    if slo.tbt_ms is not None:
        out.append(Check(f"{pct} TBT", tbt_ms, slo.tbt_ms, tbt_ms is not None and judgement.tbt_ok))
    if slo.ttft_ms is not None:
        out.append(
            Check(f"{pct} TTFT", ttft_ms, slo.ttft_ms, ttft_ms is not None and judgement.ttft_ok)
        )
    return tuple(out)


def read_json(path: Path) -> Any:
    """The JSON in ``path`` (a results file, a profile, `simulate --json` output), read within
    :mod:`budgettune.core.jsonio`'s bounds; UserError naming the file."""
    return jsonio.read_json(path, "results", max_bytes=jsonio.RESULTS_BYTES)


# ---------------------------------------------------------------------------------------------
# simulate --json


def simulate_input(
    doc: Mapping[str, Any],
    *,
    slo: Slo = Slo(),
    source: str = "simulate output",
    command: str | None = None,
) -> ReportInput:
    """A report of ``budgettune simulate --json`` output: every point is a prediction."""
    raw_points = doc.get("points")
    if not isinstance(raw_points, list) or not raw_points:
        raise UserError(f"{source}: field 'points': expected a non-empty list")
    goodput: dict[int | None, float] = {}
    for item in doc.get("goodput") or []:
        rate = as_number(item.get("rate")) if isinstance(item, Mapping) else None
        if rate is not None:
            goodput[_budget(item.get("budget"), source=source)] = rate
    points = []
    rates = set()
    for index, item in enumerate(raw_points):
        where = f"{source}: points[{index}]"
        if not isinstance(item, Mapping):
            raise UserError(f"{where}: expected an object")
        budget = _budget(item.get("budget"), source=where)
        failed = int(as_number(item.get("failed")) or 0)
        tbt = percentiles_json(item.get("tbt_ms"), failed=failed)
        ttft = percentiles_json(item.get("ttft_ms"), failed=failed)
        rate = as_number(item.get("rate"))
        if rate is not None:
            rates.add(rate)
        cache = item.get("prefix_cache")
        hits = as_number(cache.get("hit_share")) if isinstance(cache, Mapping) else None
        points.append(
            BudgetPoint(
                budget_tokens=budget,
                predicted_tbt=tbt,
                predicted_ttft=ttft,
                predicted_throughput_tokens_per_s=as_number(item.get("throughput_tokens_per_s")),
                goodput_per_s=goodput.get(budget),
                completed=int(as_number(item.get("completed")) or 0),
                failed=failed,
                passed=_judge(tbt, ttft, slo),
                predicted_cache_hit_share=hits if hits is not None and 0 <= hits <= 1 else None,
            )
        )
    passing = [p.budget_tokens for p in points if p.passed and p.budget_tokens is not None]
    best = max((b for b in passing if b is not None), default=None)
    rate = next(iter(rates)) if len(rates) == 1 else None
    sweep = SweepInput(
        points=tuple(points),
        slo_tbt_ms=slo.tbt_ms,
        slo_ttft_ms=slo.ttft_ms,
        percentile=slo.percentile,
        rate_per_s=rate,
        recommended_budget=best,
    )
    load = f"{rate:g} requests/s" if rate is not None else "several rates"
    if slo.tbt_ms is None and slo.ttft_ms is None:
        headline = f"Simulated {len(points)} budget(s) at {load} (no SLO given: nothing judged)"
        ok = None
    elif best is None:
        headline = f"No simulated budget meets the SLOs at {load}"
        ok = False
    else:
        headline = f"Largest simulated budget meeting the SLOs at {load}: {best}"
        ok = True
    best_point = next((p for p in points if p.budget_tokens == best), None)
    verdict = Verdict(
        headline=headline,
        details=("Every figure on this page is a simulator prediction, not a measurement.",),
        checks=slo_checks(best_point.predicted_tbt, best_point.predicted_ttft, slo)
        if best_point
        else (),
        facts=(*_slo_facts(slo), ("load", load)),
        ok=ok,
    )
    return ReportInput(
        title="budgettune simulate",
        kind="simulate",
        verdict=verdict,
        sweep=sweep,
        provenance=Provenance(command=command, versions=(("python", platform.python_version()),)),
    )


def prompts_fact(form: object, counted: object = None) -> tuple[str, str] | None:
    """The report's line on what the prompts were sent as (``text`` or ``ids``, as results
    record it) and, where the server reported its count, how many it found as long as
    scheduled. None for results that do not say (written before prompts could be text)."""
    if form not in PROMPT_FORM_WORDS:
        return None
    count = as_mapping(counted)
    checked, off = as_number(count.get("checked")), as_number(count.get("off"))
    if not checked or off is None:
        checked = off = 0
    return ("prompts", prompts_text(str(form), int(checked), int(off)))


def _slo_facts(slo: Slo) -> tuple[tuple[str, str], ...]:
    facts = []
    if slo.tbt_ms is not None:
        facts.append(("TBT SLO", f"p{slo.percentile:g} <= {slo.tbt_ms:g} ms"))
    if slo.ttft_ms is not None:
        facts.append(("TTFT SLO", f"p{slo.percentile:g} <= {slo.ttft_ms:g} ms"))
    return tuple(facts)


# ---------------------------------------------------------------------------------------------
# Live records (a replay's results.json, a sweep's per-budget results)


def workload_from_records(records: Sequence[RequestRecord]) -> WorkloadInput:
    ordered = sorted(records, key=lambda r: (r.target_s, r.request_id))
    return WorkloadInput(
        prompt_tokens=np.array([r.prompt_tokens for r in ordered], dtype=np.int64),
        output_tokens=np.array([r.output_tokens for r in ordered], dtype=np.int64),
        arrival_s=np.array([r.target_s for r in ordered], dtype=np.float64),
    )


def timeline_from_records(
    records: Sequence[RequestRecord], title: str, slo_tbt_ms: float | None
) -> TimelineInput:
    return TimelineInput(
        title=title,
        requests=tuple(
            TimelineRequest(r.request_id, r.sent_s, r.token_times_s, failed=not r.ok)
            for r in sorted(records, key=lambda r: (r.sent_s, r.request_id))
        ),
        slo_tbt_ms=slo_tbt_ms,
    )


def with_value(summary: Percentiles | None, percentile: float, value: float | None) -> Percentiles:
    """``summary`` with the value at ``percentile`` set (or removed for None)."""
    values = dict(summary.values_ms) if summary is not None else {}
    if value is None:
        values.pop(float(percentile), None)
    else:
        values[float(percentile)] = value
    return Percentiles(values)


def measured_point(
    records: Sequence[RequestRecord],
    *,
    budget_tokens: int | None,
    summary: Mapping[str, Any] | None,
    slo: Slo,
    predicted: Mapping[str, Any] | None = None,
    error: str | None = None,
    note: str | None = None,
) -> BudgetPoint:
    """A budget's point from its measured records; ``summary`` (the file's own, ms) wins over
    one recomputed here, so the page shows exactly what the command printed."""
    if summary is None and records:
        summary = metrics.summarize(records).to_json()
    summary = summary or {}
    failed = int(as_number(summary.get("failed")) or sum(1 for r in records if not r.ok))
    tbt = percentiles_json(summary.get("tbt_ms"), failed=failed)
    ttft = percentiles_json(summary.get("ttft_ms"), failed=failed)
    if records and (slo.tbt_ms is not None or slo.ttft_ms is not None):
        # An SLO at a percentile the summary does not hold (replay --percentile 95): read it
        # from the records, as the command's own verdict did.
        q = slo.percentile / 100
        if tbt is None or tbt.at(slo.percentile) is None:
            gaps = metrics.tbt_s(records)
            value = metrics.quantile(gaps, q) * 1e3 if len(gaps) else None
            tbt = with_value(tbt, slo.percentile, value)
        if ttft is None or ttft.at(slo.percentile) is None:
            ttft = with_value(
                ttft, slo.percentile, metrics.quantile(metrics.ttft_s(records), q) * 1e3
            )
    reasons: dict[str, int] = {}
    for record in records:
        if not record.ok:
            reason = reason_class(record.error or "short output")
            reasons[reason] = reasons.get(reason, 0) + 1
    pred_failed = int(as_number((predicted or {}).get("failed")) or 0)
    return BudgetPoint(
        budget_tokens=budget_tokens,
        measured_tbt=tbt,
        measured_ttft=ttft,
        predicted_tbt=percentiles_json((predicted or {}).get("tbt_ms"), failed=pred_failed),
        predicted_ttft=percentiles_json((predicted or {}).get("ttft_ms"), failed=pred_failed),
        throughput_tokens_per_s=as_number(summary.get("throughput_tokens_per_s")),
        predicted_throughput_tokens_per_s=as_number(
            (predicted or {}).get("throughput_tokens_per_s")
        ),
        completed=int(as_number(summary.get("completed")) or 0),
        failed=failed,
        failure_reasons=reasons,
        passed=_judge(tbt, ttft, slo),
        note=note,
        error=error,
        tbt_cdf=cdf_from_samples(metrics.tbt_s(records) * 1e3) if records else None,
        ttft_cdf=cdf_from_samples(metrics.ttft_s(records) * 1e3) if records else None,
    )


def reason_class(error: str) -> str:
    """Group failure reasons for the chart: "http 400: ..." -> "http 400", numbers dropped."""
    head = error.split(":", 1)[0].strip()
    words = [w for w in head.split() if not any(c.isdigit() for c in w) or w.isdigit()]
    return " ".join(words)[:40] or "failed"


def _live_records(
    point: Mapping[str, Any], source: str
) -> tuple[list[RequestRecord], list[RequestRecord]]:
    """(all records, measured records after warm-up) of one results point."""
    try:
        live = point_records(dict(point))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{source}: field 'records': not budgettune request records ({exc!r})"
        ) from None
    return [x.record for x in live], [x.record for x in live if not x.warmup]


def as_mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _first(mapping: Mapping[str, Any] | None, *keys: str) -> Any:
    for key in keys:
        if mapping and mapping.get(key) is not None:
            return mapping[key]
    return None


def relative_path(path: str | Path, report_dir: Path | None) -> str:
    """``path`` as a link from a page in ``report_dir`` ("../run/results.json" when needed)."""
    target = Path(path)
    if report_dir is None:
        return str(target)
    try:
        return os.path.relpath(target.resolve(), report_dir.resolve())
    except ValueError:  # another drive (Windows): no relative path exists
        return str(target)


def provenance_from_results(
    results: Results, *, files: Sequence[tuple[str, str]] = ()
) -> Provenance:
    config = results.config
    engine = results.engine or {}
    versions = [("budgettune", results.budgettune_version)]
    if engine.get("name"):
        versions.append(("engine", f"{engine['name']} {engine.get('version') or ''}".strip()))
    python = _first(config, "python_version") or _first(results.hardware, "python")
    versions.append(("python", python_text(python)))
    launch = engine.get("command")
    if isinstance(launch, list) and launch:
        versions.append(("engine command", shlex.join(str(a) for a in launch)))
    hardware = [(str(k), _text(v)) for k, v in (results.hardware or {}).items()]
    trace = _first(config, "trace", "trace_path")
    checksum = _first(config, "trace_sha256", "trace_checksum")
    if trace and not checksum:
        checksum = sha256_now(Path(str(trace)))
    return Provenance(
        command=shlex.join(results.command) if results.command else None,
        versions=tuple(versions),
        hardware=tuple(hardware),
        trace=None if trace is None else str(trace),
        trace_sha256=checksum,
        created=results.created_utc or None,
        files=tuple(files),
    )


def python_text(recorded: object) -> str:
    """The Python version the run recorded, else this one's, marked "(now)"."""
    return str(recorded) if recorded else f"{platform.python_version()} (now)"


def sha256_now(path: Path) -> str | None:
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"{digest.hexdigest()} (of the file now at that path)"


def _text(value: object) -> str:
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True)[:300]
    return str(value)


def _replay_facts(
    results: Results, engine: Mapping[str, Any], model: object, first: BudgetPoint
) -> list[tuple[str, str]]:
    """The facts a replay's verdict lists, from its first point's record and self-check: the
    engine, model and budget, the load asked and achieved, the send lag, the requests, the
    prompts' form and the server's own /metrics (the SLOs are added by the caller)."""
    raw0 = results.points[0]
    rate = as_number(_first(raw0, "rate", "rate_per_s")) or as_number(
        _first(results.config, "rate", "rate_per_s")
    )
    selfcheck0 = as_mapping(raw0.get("selfcheck"))
    facts: list[tuple[str, str]] = [("engine", _text(engine.get("name", "unknown")))]
    if model:
        facts.append(("model", _text(model)))
    facts.append(("budget", first.label))
    if rate is not None:
        facts.append(("target load", f"{rate:g} requests/s"))
    achieved = as_number(selfcheck0.get("achieved_rate_per_s"))
    if achieved is not None:
        facts.append(("achieved load", f"{achieved:.3g} requests/s"))
    lag = as_mapping(selfcheck0.get("send_lag_ms"))
    if lag:
        facts.append(
            (
                "send lag (load generator)",
                f"p50 {lag.get('p50')} ms, p99 {lag.get('p99')} ms, max {lag.get('max')} ms",
            )
        )
    facts.append(("requests", f"{first.completed} completed, {first.failed} failed"))
    prompts = prompts_fact(selfcheck0.get("prompt_form"), selfcheck0.get("prompt_tokens"))
    if prompts is not None:
        facts.append(prompts)
    server = as_mapping(selfcheck0.get("server"))
    itl, ttft_server = as_mapping(server.get("itl")), as_mapping(server.get("ttft"))
    if itl.get("p99_ms") is not None or ttft_server.get("p99_ms") is not None:
        facts.append(
            (
                "server's own /metrics (bucket estimates)",
                f"ITL p99 {itl.get('p99_ms', '-')} ms, "
                f"TTFT p99 {ttft_server.get('p99_ms', '-')} ms",
            )
        )
    return facts


def _merged_chunks_note(selfcheck: Mapping[str, Any]) -> list[str]:
    """The page's note on stream chunks that carried several tokens, when the self-check warned
    of them (none otherwise)."""
    if not selfcheck.get("merged_chunks_warning"):
        return []
    return [
        f"{selfcheck.get('merged_chunks')} stream chunks carried several tokens "
        f"({100 * float(selfcheck.get('merged_chunk_share') or 0):.1f}%); their gaps were "
        f"handled as '{selfcheck.get('merged_chunks_mode')}'."
    ]


def _replay_files(
    engine: Mapping[str, Any], results_file: Path | None, report_dir: Path | None
) -> list[tuple[str, str]]:
    """The raw files a replay's page links to, relative to the page: results.json, the log."""
    files: list[tuple[str, str]] = []
    if results_file is not None:
        files.append(("results (raw per-request records)", relative_path(results_file, report_dir)))
    log = _first(engine, "log_path", "log")
    if log:
        files.append(("engine log", relative_path(str(log), report_dir)))
    return files


def results_input(
    results: Results,
    *,
    slo: Slo = Slo(),
    source: str = "results.json",
    report_dir: Path | None = None,
    results_file: Path | None = None,
) -> ReportInput:
    """A report of one replay: its point's figures, CDFs, workload and token timeline
    (``simulate -o`` results have their own adapter, :mod:`.sources_simulate`)."""
    if not results.points:
        raise UserError(f"{source}: field 'points': no measured point in this results file")
    slo = recorded_slo(results.config, slo)
    engine = results.engine or {}
    points: list[BudgetPoint] = []
    timeline: TimelineInput | None = None
    workload: WorkloadInput | None = None
    notes: list[str] = []
    if not results.complete:
        notes.append(f"Incomplete run: {results.incomplete_reason or 'interrupted'}; partial data.")
    for index, raw in enumerate(results.points):
        where = f"{source}: points[{index}]"
        if not isinstance(raw, Mapping):
            raise UserError(f"{where}: expected an object")
        everything, measured = _live_records(raw, where)
        budget = _budget(
            _first(raw, "budget", "budget_tokens") or _first(engine, "budget", "budget_tokens"),
            source=where,
        )
        summary = (
            raw.get("summary")
            if isinstance(raw.get("summary"), Mapping)
            else (raw if "tbt_ms" in raw else None)
        )
        points.append(measured_point(measured, budget_tokens=budget, summary=summary, slo=slo))
        notes += _merged_chunks_note(as_mapping(raw.get("selfcheck")))
        if index == 0 and everything:
            workload = workload_from_records(everything)
            timeline = timeline_from_records(
                everything, f"Token timeline, budget {points[-1].label}", slo.tbt_ms
            )
    first = points[0]
    sweep = SweepInput(
        points=tuple(points),
        slo_tbt_ms=slo.tbt_ms,
        slo_ttft_ms=slo.ttft_ms,
        percentile=slo.percentile,
    )
    model = _first(results.config, "model") or engine.get("model")
    facts = _replay_facts(results, engine, model, first)
    facts += list(_slo_facts(slo))
    tbt99 = None if first.measured_tbt is None else first.measured_tbt.at(slo.percentile)
    ttft99 = None if first.measured_ttft is None else first.measured_ttft.at(slo.percentile)
    pct = f"p{slo.percentile:g}"
    headline = (
        f"One measurement at budget {first.label}: {pct} TBT "
        f"{format_ms(tbt99)}, {pct} TTFT {format_ms(ttft99)}"
    )
    verdict = Verdict(
        headline=headline,
        checks=slo_checks(first.measured_tbt, first.measured_ttft, slo),
        facts=tuple(facts),
        ok=first.passed,
    )
    files = _replay_files(engine, results_file, report_dir)
    return ReportInput(
        title=f"budgettune {results.kind}: {_text(model or engine.get('name', ''))}".rstrip(": "),
        kind=results.kind,
        verdict=verdict,
        sweep=sweep,
        workload=workload,
        timeline=timeline,
        provenance=provenance_from_results(results, files=files),
        notes=tuple(notes),
    )
