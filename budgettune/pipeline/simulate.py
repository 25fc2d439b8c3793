"""`simulate`: each budget through the simulator, summarized, optionally with its goodput. The
schedule comes from a function rate -> Schedule, so synthetic arrivals and replayed traces
scaled to a rate plug in alike. No flag parsing, no printing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from budgettune.errors import SpecError
from budgettune.metrics import MetricsSummary, summarize
from budgettune.search import SLO, GoodputResult, RateProbe, find_goodput
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.sim.stepmodel import StepModel
from budgettune.trace.schedule import Schedule
from budgettune.units import parse_tokens

Budget = int | None  # None: the prefill-first ("none") policy

DEFAULT_BUDGETS = "256,512,1024,2048,8192,none"
_NONE_NAMES = {"none", "off", "nochunk", "no-chunking"}


def parse_budgets(text: str, *, option: str = "--budgets") -> list[Budget]:
    """Parse "256,512,8k,none" (``none``: no chunking, prefill-first). Raises SpecError."""
    budgets: list[Budget] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        if part.lower() in _NONE_NAMES:
            budgets.append(None)
            continue
        value = parse_tokens(part, option=option)
        if value <= 0:
            raise SpecError(f"{option}: a budget must be positive, got {part!r}")
        budgets.append(value)
    if not budgets:
        raise SpecError(f"{option}: no budget in {text!r}; write e.g. {DEFAULT_BUDGETS}")
    return budgets


def budget_label(budget: Budget) -> str:
    return "none" if budget is None else str(budget)


@dataclass(frozen=True, slots=True)
class SimPoint:
    """One (budget, rate) simulation."""

    budget_tokens: Budget
    rate_per_s: float
    summary: MetricsSummary
    iterations: int
    preemptions: int

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget_tokens, "rate": self.rate_per_s, **self.summary.to_json()}


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
        doc: dict[str, Any] = {"points": [p.to_json() for p in self.points]}
        if self.goodput is not None:
            doc["goodput"] = [g.to_json() for g in self.goodput]
        return doc


def simulate_point(
    schedule: Schedule,
    step_model: StepModel,
    config: SchedulerConfig,
    *,
    rate_per_s: float,
    warmup_requests: int = 0,
) -> SimPoint:
    """Simulate one schedule under one scheduler config and summarize it."""
    result = simulate(schedule, step_model, config)
    return SimPoint(
        budget_tokens=config.budget_tokens,
        rate_per_s=rate_per_s,
        summary=summarize(result.records, warmup_requests=warmup_requests),
        iterations=result.iterations,
        preemptions=result.preemptions,
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
) -> SimulateReport:
    """Simulate every budget at ``rate_per_s``; with ``slo``, also each budget's goodput.

    ``scheduler`` supplies everything but the budget. Raises SpecError for a bad budget or
    rate before anything runs.
    """
    if not rate_per_s > 0:
        raise SpecError(f"--rate: must be positive, got {rate_per_s!r}")
    if warmup_requests < 0:
        raise SpecError(f"--warmup: must be zero or more, got {warmup_requests}")
    configs = [dataclasses.replace(scheduler, budget_tokens=b) for b in budgets]
    schedule = schedule_at(rate_per_s)
    if warmup_requests >= len(schedule):
        raise SpecError(
            f"--warmup: {warmup_requests} leaves none of the {len(schedule)} requests to measure"
        )
    points = []
    for config in configs:
        point = simulate_point(
            schedule, step_model, config, rate_per_s=rate_per_s, warmup_requests=warmup_requests
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
