"""`simulate`: each budget through the simulator, summarized, optionally with its goodput. The
schedule comes from a function rate -> Schedule, so synthetic arrivals and replayed traces
scaled to a rate plug in alike. No flag parsing, no printing.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from budgettune.app.requests import SIMULATE_BUDGETS
from budgettune.core import metrics
from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.errors import SpecError
from budgettune.core.hardware import HardwareFacts
from budgettune.core.metrics import MetricsSummary, summarize
from budgettune.core.records import RequestRecord
from budgettune.core.slo import SLO
from budgettune.core.units import list_items, parse_tokens
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.schedule import Schedule
from budgettune.tune.goodput import GoodputResult, RateProbe, find_goodput

if TYPE_CHECKING:  # results pulls in the live load runner (httpx): imported when writing only
    from budgettune.artifacts.results import Results

Budget = int | None  # None: the prefill-first ("none") policy

DEFAULT_BUDGETS = SIMULATE_BUDGETS
_NONE_NAMES = {"none", "off", "nochunk", "no-chunking"}
TBT_CDF_POINTS = 1000  # order statistics kept per point in results.json (of ~500,000 gaps)
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def parse_budgets(text: str, *, field: str = "budgets") -> list[Budget]:
    """Parse "256,512,8k,none" (``none``: no chunking, prefill-first). Raises SpecError on
    ``field``."""
    budgets: list[Budget] = []
    # the same list rules as sweep's --budgets: each value is a simulation of its own
    for part in list_items(text, field=field):
        if part.lower() in _NONE_NAMES:
            budgets.append(None)
            continue
        value = parse_tokens(part, field=field)
        if value <= 0:
            raise SpecError(f"a budget must be positive, got {part!r}", field=field)
        budgets.append(value)
    if not budgets:
        raise SpecError(f"no budget in {text!r}; write e.g. {DEFAULT_BUDGETS}", field=field)
    return budgets


def budget_label(budget: Budget) -> str:
    return "none" if budget is None else str(budget)


@dataclass(frozen=True, slots=True)
class PointDetail:
    """Per-request figures of one simulated point, compact enough for results.json (about 50
    bytes a request instead of every token's time): one row per request in send order, the
    first ``warmup_requests`` of them left out of the metrics, and the pooled TBT gaps after
    warm-up kept as order statistics (``tbt_cdf_s`` at ``tbt_cdf_fraction``: evenly spread
    ranks plus ranks dense in the tail, so the CDF's body and its p99.9 both stay exact)."""

    target_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray
    tokens: IntArray  # output tokens delivered
    ttft_s: FloatArray  # +inf for a failed request
    e2e_s: FloatArray  # +inf for a failed request
    preemptions: IntArray
    errors: tuple[str | None, ...]
    warmup_requests: int
    tbt_cdf_s: FloatArray
    tbt_cdf_fraction: FloatArray
    tbt_samples: int

    @classmethod
    def from_records(cls, records: Sequence[RequestRecord], warmup_requests: int) -> PointDetail:
        ordered = metrics.after_warmup(records)  # send order, as the metrics count warm-up
        gaps = np.sort(metrics.tbt_s(ordered[warmup_requests:]))
        ranks = tail_dense_ranks(len(gaps), TBT_CDF_POINTS)
        return cls(
            target_s=np.array([r.target_s for r in ordered], dtype=np.float64),
            prompt_tokens=np.array([r.prompt_tokens for r in ordered], dtype=np.int64),
            output_tokens=np.array([r.output_tokens for r in ordered], dtype=np.int64),
            tokens=np.array([len(r.token_times_s) for r in ordered], dtype=np.int64),
            ttft_s=metrics.ttft_s(ordered),
            e2e_s=metrics.e2e_s(ordered),
            preemptions=np.array([r.preemptions for r in ordered], dtype=np.int64),
            errors=tuple(r.error for r in ordered),
            warmup_requests=warmup_requests,
            tbt_cdf_s=gaps[ranks],
            tbt_cdf_fraction=(ranks + 1) / max(len(gaps), 1),
            tbt_samples=len(gaps),
        )

    def to_json(self) -> dict[str, Any]:
        """Columns of equal length under ``requests`` (ms rounded to 1 us, null for a failed
        request's TTFT/E2E), plus ``warmup_requests`` and ``tbt_cdf_ms``."""
        return {
            "warmup_requests": self.warmup_requests,
            "requests": {
                "target_s": _rounded(self.target_s, 6),
                "prompt_tokens": self.prompt_tokens.tolist(),
                "output_tokens": self.output_tokens.tolist(),
                "tokens": self.tokens.tolist(),
                "ttft_ms": _rounded(self.ttft_s * 1e3, 3),
                "e2e_ms": _rounded(self.e2e_s * 1e3, 3),
                "preemptions": self.preemptions.tolist(),
                "error": list(self.errors),
            },
            "tbt_cdf_ms": {
                "ms": _rounded(self.tbt_cdf_s * 1e3, 4),
                "fraction": _rounded(self.tbt_cdf_fraction, 7),
                "samples": self.tbt_samples,
            },
        }


def tail_dense_ranks(n: int, max_points: int) -> IntArray:
    """At most ``max_points`` ranks of ``n`` sorted samples: half evenly spaced, half spaced
    evenly in log(1 - F) (dense in the tail); the first and the last always kept."""
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    half = max_points // 2
    even = np.linspace(0, n - 1, half)
    tail = n - np.geomspace(1.0, float(n), max_points - half)
    picked = np.round(np.concatenate([[0, n - 1], even, tail])).astype(np.int64)
    return np.unique(np.clip(picked, 0, n - 1))


def _rounded(values: FloatArray, digits: int) -> list[float | None]:
    return [round(float(v), digits) if math.isfinite(v) else None for v in values]


@dataclass(frozen=True, slots=True)
class SimPoint:
    """One (budget, rate) simulation; ``detail`` only when asked for (results files)."""

    budget_tokens: Budget
    rate_per_s: float
    summary: MetricsSummary
    iterations: int
    preemptions: int
    detail: PointDetail | None = None
    prefix_cache: PrefixCacheCount | None = None  # None: the engine kept no prefix cache

    def to_json(self) -> dict[str, Any]:
        doc = {"budget": self.budget_tokens, "rate": self.rate_per_s, **self.summary.to_json()}
        if self.prefix_cache is not None:
            doc["prefix_cache"] = self.prefix_cache.to_json()
        return doc


@dataclass(frozen=True, slots=True)
class BudgetGoodput:
    budget_tokens: Budget
    result: GoodputResult

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget_tokens, "rate": self.result.rate_per_s}


@dataclass(frozen=True, slots=True)
class SimulateReport:
    points: tuple[SimPoint, ...]
    goodput: tuple[BudgetGoodput, ...] | None

    def to_json(self) -> dict[str, Any]:
        doc = {"points": [p.to_json() for p in self.points]}
        if self.goodput is not None:
            doc["goodput"] = [g.to_json() for g in self.goodput]
        return doc

    def results_points(self) -> list[dict[str, Any]]:
        """The points for results.json: each ``to_json`` point plus its iteration and
        preemption counts, its goodput (with ``--goodput``) and its per-request detail."""
        goodput = {g.budget_tokens: g.result for g in self.goodput or ()}
        out = []
        for point in self.points:
            item = point.to_json()
            item.update(iterations=point.iterations, preemptions=point.preemptions)
            if point.budget_tokens in goodput:
                result = goodput[point.budget_tokens]
                upper = result.upper_per_s
                item["goodput"] = {
                    "rate": result.rate_per_s,
                    "capped": result.capped,
                    "upper_rate": upper if math.isfinite(upper) else None,
                }
            if point.detail is not None:
                item.update(point.detail.to_json())
            out.append(item)
        return out


def simulate_point(
    schedule: Schedule,
    step_model: StepModel,
    config: SchedulerConfig,
    *,
    rate_per_s: float,
    warmup_requests: int = 0,
    keep_detail: bool = False,
) -> SimPoint:
    """Simulate one schedule under one scheduler config and summarize it (with ``keep_detail``,
    also its per-request figures)."""
    result = simulate(schedule, step_model, config)
    return SimPoint(
        budget_tokens=config.budget_tokens,
        rate_per_s=rate_per_s,
        summary=summarize(result.records, warmup_requests=warmup_requests),
        iterations=result.iterations,
        preemptions=result.preemptions,
        detail=PointDetail.from_records(result.records, warmup_requests) if keep_detail else None,
        prefix_cache=result.prefix_cache,
    )


def run_simulate(
    *,
    step_model: StepModel,
    scheduler: SchedulerConfig,
    budgets: Sequence[Budget],
    schedule_at: Callable[[float], Schedule],
    rate_per_s: float,
    warmup_requests: int = 0,
    slo: SLO | None = None,
    on_point: Callable[[SimPoint], None] | None = None,
    on_probe: Callable[[Budget, RateProbe], None] | None = None,
    keep_detail: bool = False,
) -> SimulateReport:
    """Simulate every budget at ``rate_per_s``; with ``slo``, also each budget's goodput.

    ``scheduler`` supplies everything but the budget. ``keep_detail`` keeps the per-request
    figures of the points at ``rate_per_s`` (not of the goodput probes) for results.json.
    Raises SpecError for a bad budget or rate before anything runs.
    """
    if not rate_per_s > 0:
        raise SpecError(f"must be positive, got {rate_per_s!r}", field="rate")
    if warmup_requests < 0:
        raise SpecError(f"must be zero or more, got {warmup_requests}", field="warmup")
    configs = [dataclasses.replace(scheduler, budget_tokens=b) for b in budgets]
    schedule = schedule_at(rate_per_s)
    if warmup_requests >= len(schedule):
        raise SpecError(
            f"{warmup_requests} leaves none of the {len(schedule)} requests to measure",
            field="warmup",
        )
    points = []
    for config in configs:
        point = simulate_point(
            schedule,
            step_model,
            config,
            rate_per_s=rate_per_s,
            warmup_requests=warmup_requests,
            keep_detail=keep_detail,
        )
        points.append(point)
        if on_point is not None:
            on_point(point)
    if slo is None:
        return SimulateReport(tuple(points), None)
    goodput = []
    for config, first in zip(configs, points, strict=True):
        budget = config.budget_tokens

        def evaluate(
            rate: float, config: SchedulerConfig = config, first: SimPoint = first
        ) -> MetricsSummary:
            if rate == first.rate_per_s:  # the point already simulated above
                return first.summary
            return simulate_point(
                schedule_at(rate),
                step_model,
                config,
                rate_per_s=rate,
                warmup_requests=warmup_requests,
            ).summary

        def report(probe: RateProbe, budget: Budget = budget) -> None:
            if on_probe is not None:
                on_probe(budget, probe)

        result = find_goodput(evaluate, slo, start_rate_per_s=rate_per_s, on_probe=report)
        goodput.append(BudgetGoodput(budget, result))
    return SimulateReport(tuple(points), tuple(goodput))


def simulate_results(
    report: SimulateReport,
    *,
    config: Mapping[str, object],
    command: Sequence[str],
    hardware: HardwareFacts | None,
    trace_sha256: str | None = None,
) -> Results:
    """The ``simulate`` results document: ``config`` (every option's value) plus the trace's
    SHA-256 when there is one, and :meth:`SimulateReport.results_points` as the points."""
    from budgettune.artifacts.results import Results

    config = dict(config)
    if trace_sha256 is not None:
        config["trace_sha256"] = trace_sha256
    return Results(
        kind="simulate",
        config=config,
        points=report.results_points(),
        command=list(command),
        hardware=None if hardware is None else hardware.to_json(),
    )


def write_simulate_outputs(results: Results, folder: Path) -> tuple[Path, Path]:
    """Write ``folder``/results.json and the HTML report rendered from it; returns both paths.
    Raises UserError when the folder cannot be written."""
    from budgettune.app.report import run_report
    from budgettune.artifacts.results import RESULTS_FILE, save_results

    results_file = save_results(results, folder / RESULTS_FILE)  # -o is a folder, even x.json
    page = run_report(results_file)
    return results_file, page.path
