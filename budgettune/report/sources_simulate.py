"""Adapter for the results.json of ``simulate -o`` (kind "simulate"): the simulate points, each
budget's TTFT CDF (from its per-request TTFTs) and TBT CDF (stored order statistics), and the
workload, into the report's inputs. The table part is :func:`.sources.simulate_input`'s.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from budgettune.artifacts.results import Results
from budgettune.core.errors import UserError
from budgettune.report.inputs import Cdf, ReportInput, WorkloadInput, cdf_from_samples
from budgettune.report.sources import (
    Slo,
    as_mapping,
    provenance_from_results,
    recorded_slo,
    relative_path,
    simulate_input,
)


def simulate_results_input(
    results: Results,
    *,
    slo: Slo = Slo(),
    source: str = "results.json",
    report_dir: Path | None = None,
    results_file: Path | None = None,
) -> ReportInput:
    """The simulate page from its results file. Without SLOs from the caller, the run's own
    (``slo_tbt_s``/``slo_ttft_s`` in its config) judge the budgets."""
    config = results.config
    slo = recorded_slo(config, slo)
    goodput = [
        {"budget": p.get("budget"), "rate": as_mapping(p.get("goodput")).get("rate")}
        for p in results.points
        if isinstance(p, Mapping) and isinstance(p.get("goodput"), Mapping)
    ]
    command = shlex.join(results.command) if results.command else None
    page = simulate_input(
        {"points": results.points, "goodput": goodput}, slo=slo, source=source, command=command
    )
    assert page.sweep is not None and page.verdict is not None
    points = []
    for index, (point, raw) in enumerate(zip(page.sweep.points, results.points, strict=True)):
        tbt, ttft = _cdfs(raw, f"{source}: points[{index}]")
        points.append(dataclasses.replace(point, tbt_cdf=tbt, ttft_cdf=ttft))
    files: list[tuple[str, str]] = []
    if results_file is not None:
        files.append(("results (per-request figures)", relative_path(results_file, report_dir)))
    model, gpu = config.get("model"), config.get("gpu")
    facts: list[tuple[str, str]] = []
    if model:
        facts.append(("model", f"{model} on {gpu}" if gpu else str(model)))
    if config.get("traffic"):
        facts.append(("traffic", str(config["traffic"])))
    return dataclasses.replace(
        page,
        title=f"budgettune simulate: {model}" if model else page.title,
        sweep=dataclasses.replace(page.sweep, points=tuple(points)),
        verdict=dataclasses.replace(page.verdict, facts=(*facts, *page.verdict.facts)),
        workload=_workload(results.points[0], f"{source}: points[0]"),
        provenance=provenance_from_results(results, files=files),
    )


def _cdfs(raw: Mapping[str, Any], where: str) -> tuple[Cdf | None, Cdf | None]:
    """(TBT, TTFT) CDFs of one point, ms; None where the point holds no per-request figures."""
    try:
        tbt = None
        stored = as_mapping(raw.get("tbt_cdf_ms"))
        if stored.get("ms"):
            values = np.asarray(stored["ms"], dtype=np.float64)
            fraction = np.asarray(stored["fraction"], dtype=np.float64)
            if values.shape != fraction.shape:
                raise ValueError("'ms' and 'fraction' differ in length")
            tbt = Cdf(values, fraction)
        requests = as_mapping(raw.get("requests"))
        ttft = None
        if "ttft_ms" in requests:
            warmup = int(raw.get("warmup_requests") or 0)
            kept = requests["ttft_ms"][warmup:]
            ttft = cdf_from_samples([math.inf if v is None else float(v) for v in kept])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: per-request figures unreadable ({exc})") from None
    return tbt, ttft


def _workload(raw: Any, where: str) -> WorkloadInput | None:
    requests = as_mapping(as_mapping(raw).get("requests"))
    if "prompt_tokens" not in requests:
        return None
    try:
        return WorkloadInput(
            prompt_tokens=np.asarray(requests["prompt_tokens"], dtype=np.int64),
            output_tokens=np.asarray(requests["output_tokens"], dtype=np.int64),
            arrival_s=np.asarray(requests["target_s"], dtype=np.float64),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"{where}: field 'requests' unreadable ({exc})") from None
