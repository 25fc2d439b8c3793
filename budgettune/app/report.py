"""`report`: rebuild the HTML page from result files alone (no engine, no GPU).

Accepts a replay's results.json (or its folder), a sweep run folder, a profile JSON, or the JSON
``simulate --json`` prints; the kind is detected from the content.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgettune.app.profile import summarize as profile_summary
from budgettune.app.requests import PROFILE_MAX_TOKENS, ReportRequest
from budgettune.artifacts.recommendation import SweepDocument
from budgettune.artifacts.results import RESULTS_FILE, Results
from budgettune.artifacts.sweep_options import OPTIONS_KEY
from budgettune.core.errors import BudgettuneError, SpecError, UserError
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.core.slo import check_percentile
from budgettune.model.profile import Profile, load_profile, profile_from_json
from budgettune.model.stepmodel import StepModel
from budgettune.report.html import write_report
from budgettune.report.inputs import ProfileInput, ReportInput
from budgettune.report.sources import (
    Slo,
    read_json,
    relative_path,
    results_input,
    simulate_input,
)
from budgettune.report.sources_profile import model_profile_input, profile_input, profile_report
from budgettune.report.sources_simulate import simulate_results_input
from budgettune.report.sources_sweep import (
    POINTS_FILE,
    RECOMMENDATION_FILE,
    SETTINGS_FILE,
    is_sweep_folder,
    sweep_document_input,
    sweep_input,
    sweep_results_input,
)

REPORT_FILE = "report.html"
KINDS = ("replay/results", "sweep run folder", "profile", "simulate --json output")


@dataclass(slots=True, frozen=True)
class ReportOutcome:
    """What was written: the page, the kind of input it came from, its charts and size."""

    path: Path
    kind: str
    chart_ids: tuple[str, ...]
    size_bytes: int


def detect_kind(doc: Any, *, source: str = "report") -> str:
    """ "results", "profile" or "simulate" from a parsed JSON document; UserError (naming
    ``source``) otherwise."""
    if isinstance(doc, Mapping):
        if "probes" in doc and "model" in doc:
            return "profile"
        if "schema_version" in doc and "points" in doc and "kind" in doc:
            return "results"
        if isinstance(doc.get("points"), list) and "schema_version" not in doc:
            return "simulate"
    raise UserError(
        f"{source}: cannot tell what this file is; expected one of: " + ", ".join(KINDS)
    )


def profile_page(
    profile: Profile,
    *,
    typical_batch: int = 64,
    typical_context: int = 1024,
    profile_file: str | None = None,
    others: tuple[Profile, ...] = (),
) -> ReportInput:
    """The report input of a profile, with its budget floor and TBT-target budgets."""
    summary = profile_summary(profile, typical_batch, typical_context)
    floor = None if summary is None else summary.floor_tokens
    ceilings = (
        {} if summary is None else {t * 1e3: b for t, b in summary.tbt_budgets if b is not None}
    )
    return profile_report(
        profile,
        floor_tokens=floor,
        ceilings_tokens=ceilings,
        ceilings_note=f"with {typical_batch} decodes at context {typical_context} beside the chunk",
        others=others,
        profile_file=profile_file,
    )


def sweep_profile(doc: Mapping[str, Any], run_dir: Path) -> ProfileInput | None:
    """The profile section of a sweep: the profile it ran on (--profile), else the preset roofline
    it used, with the candidates' floor and the TBT-SLO ceiling marked; None if neither is known.
    """
    settings = doc.get("settings") or {}
    cands = doc.get("candidates") or {}
    floor, ceiling = cands.get("floor_tokens"), cands.get("ceiling_tokens")
    slo_ms = (doc.get("slo") or {}).get("tbt_ms")
    ceilings = {float(slo_ms): int(ceiling)} if slo_ms and ceiling else {}
    batch = cands.get("decode_batch")
    note = None if batch is None else f"with {float(batch):.3g} decodes, the expected batch"
    named = settings.get("profile")
    if named:
        for path in (Path(str(named)), run_dir / str(named)):
            if path.is_file():
                return profile_input(
                    [load_profile(path)],
                    floor_tokens=floor,
                    ceilings_tokens=ceilings,
                    ceilings_note=note,
                )
        return None
    model, gpu = settings.get("model"), settings.get("gpu")
    if not (model and gpu):
        return None
    # the sweep's own preset roofline (bfloat16, its calibration; none saved: the seed's, which
    # every sweep ran before calibrations were named)
    # a sweep keeps every option as it resolved it under settings.options (OPTIONS_KEY)
    options = settings.get(OPTIONS_KEY) or {}
    calibration = str(options.get("calibration") or settings.get("calibration") or "seed")
    try:
        step_model = StepModel.from_hardware(
            resolve_model(str(model)), resolve_gpu(str(gpu)), calibration=calibration
        )
    except BudgettuneError:
        return None
    return model_profile_input(
        step_model,
        label=f"roofline model of {model} on {gpu} (calibration {calibration})",
        max_tokens=PROFILE_MAX_TOKENS,
        floor_tokens=floor,
        ceilings_tokens=ceilings,
        ceilings_note=note,
    )


def build_input(
    source: Path,
    *,
    slo: Slo = Slo(),
    report_dir: Path | None = None,
    compare: Sequence[Path] = (),
) -> ReportInput:
    """Read ``source`` (file or folder) into the report's input; ``compare``: other profiles
    drawn beside a profile source's curve (``--with``). Raises UserError naming the file."""
    others = tuple(load_profile(path, field="compare") for path in compare)
    not_a_profile = SpecError(
        f"applies to a profile JSON source, and {source} is not one", field="compare"
    )
    if source.is_file() and source.name in (RECOMMENDATION_FILE, POINTS_FILE, SETTINGS_FILE):
        source = source.parent
    if others and source.is_dir():  # a sweep's or a replay's folder
        raise not_a_profile
    if is_sweep_folder(source):
        return _with_sweep_profile(*sweep_input(source, slo=slo, report_dir=report_dir), source)
    if source.is_dir():
        if (source / RESULTS_FILE).is_file():
            source = source / RESULTS_FILE
        else:
            raise UserError(
                f"report: {source}: no {RESULTS_FILE} or sweep files in this folder",
                hint="give a sweep run folder, a results.json, a profile JSON or a simulate "
                "--json file",
            )
    if not source.exists():
        raise UserError(f"report: {source}: no such file or folder")
    doc = read_json(source)
    kind = detect_kind(doc, source=f"report: {source}")
    if others and kind != "profile":
        raise not_a_profile
    if kind == "profile":
        loaded = profile_from_json(doc, source=str(source))
        return profile_page(loaded, profile_file=relative_path(source, report_dir), others=others)
    if kind == "results":
        results = Results.from_json(doc, source=str(source))
        if results.kind == "simulate":  # `simulate -o`: predictions, not measurements
            return simulate_results_input(
                results, slo=slo, source=str(source), report_dir=report_dir, results_file=source
            )
        if results.kind == "sweep":
            report, sweep_doc = sweep_results_input(
                results, source=source, slo=slo, report_dir=report_dir
            )
            return _with_sweep_profile(report, sweep_doc, source.parent)
        return results_input(
            results, slo=slo, source=str(source), report_dir=report_dir, results_file=source
        )
    return simulate_input(doc, slo=slo, source=str(source))


def default_output(source: Path) -> Path:
    """report.html in the source's folder (or in the folder given)."""
    return (source if source.is_dir() else source.parent) / REPORT_FILE


def report_for(request: ReportRequest) -> ReportOutcome:
    """The page a :class:`ReportRequest` asks for: its SLOs checked and parsed (errors name the
    field), then :func:`run_report`."""
    percentile = check_percentile(request.slo.percentile)
    tbt_s, ttft_s = request.slo.targets_s()
    slo = Slo(
        tbt_ms=None if tbt_s is None else tbt_s * 1e3,
        ttft_ms=None if ttft_s is None else ttft_s * 1e3,
        percentile=percentile,
    )
    return run_report(request.source, output=request.output, slo=slo, compare=request.compare)


def run_report(
    source: Path,
    *,
    output: Path | None = None,
    slo: Slo = Slo(),
    compare: Sequence[Path] = (),
) -> ReportOutcome:
    """Rebuild the page for ``source`` and write it to ``output`` (default: beside the source)."""
    target = output or default_output(source)
    if target.exists() and target.is_dir():
        target = target / REPORT_FILE
    report = build_input(source, slo=slo, report_dir=target.parent, compare=compare)
    page = write_report(report, target)
    return ReportOutcome(target, report.kind, page.chart_ids, len(page.html.encode("utf-8")))


def write_sweep_report(document: SweepDocument, run_dir: Path) -> Path:
    """The page of a sweep that has just run, built from its document in memory (``budgettune
    report`` of its folder rebuilds the same page from the files), into the run folder."""
    report = _with_sweep_profile(*sweep_document_input(document, run_dir), run_dir)
    target = run_dir / REPORT_FILE
    write_report(report, target)
    return target


def _with_sweep_profile(report: ReportInput, doc: Mapping[str, Any], run_dir: Path) -> ReportInput:
    """A sweep's page with its profile section (:func:`sweep_profile`), when it has one."""
    profile = sweep_profile(doc, run_dir)
    return report if profile is None else dataclasses.replace(report, profile=profile)
