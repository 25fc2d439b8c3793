"""Simulator predictions for the sweep: each candidate's percentile TBT and TTFT at the target
load, and the decode batch the engine will carry (from which the candidates are derived)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.metrics import MetricsSummary, quantile, summarize, tbt_s, ttft_s
from budgettune.core.records import RequestRecord
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.schedule import Schedule


@dataclass(frozen=True, slots=True)
class Prediction:
    """What the calibrated simulator expects at one budget (percentile at ``quantile``)."""

    budget_tokens: int | None
    tbt_s: float
    ttft_s: float
    summary: MetricsSummary
    decode_batch: float
    prefix_cache: PrefixCacheCount | None = None  # None: the scheduler keeps no prefix cache


def mean_decode_batch(records: Sequence[RequestRecord]) -> float:
    """Time-average number of requests between first and last token (Little's law)."""
    busy_s = sum(
        float(r.token_times_s[-1] - r.token_times_s[0]) for r in records if len(r.token_times_s) > 1
    )
    ends = [float(r.token_times_s[-1]) for r in records if len(r.token_times_s)]
    if not ends:
        return 0.0
    span_s = max(ends) - min(r.sent_s for r in records)
    return busy_s / span_s if span_s > 0 else 0.0


def predict(
    schedule: Schedule,
    model: StepModel,
    scheduler: SchedulerConfig,
    budget_tokens: int | None,
    *,
    q: float,
    warmup_requests: int = 0,
    concurrency: int | None = None,
) -> Prediction:
    """Simulate ``schedule`` at one budget and read the q-quantiles the SLOs constrain
    (``concurrency``: a closed loop with that many in flight, as the replays will send)."""
    config = dataclasses.replace(scheduler, budget_tokens=budget_tokens)
    result = simulate(schedule, model, config, concurrency=concurrency)
    records = result.records
    kept = sorted(records, key=lambda r: (r.target_s, r.request_id))[warmup_requests:]
    gaps = tbt_s(kept)
    return Prediction(
        budget_tokens=budget_tokens,
        tbt_s=quantile(gaps, q) if len(gaps) else 0.0,
        ttft_s=quantile(ttft_s(kept), q),
        summary=summarize(kept),
        decode_batch=mean_decode_batch(kept),
        prefix_cache=result.prefix_cache,
    )


def typical_context_tokens(schedule: Schedule) -> float:
    """Context of an average decode: the mean prompt plus half the mean output."""
    return float(np.mean(schedule.prompt_tokens) + np.mean(schedule.output_tokens) / 2.0)
