"""A budget's verdict over its replays: pooled figures, which intervals decide clear or
marginal, and an early stop's unjudged SLO."""

from __future__ import annotations

import numpy as np

from budgettune.core.confidence import Confidence
from budgettune.core.records import RequestRecord
from budgettune.core.slo import SLO
from budgettune.tune.confidence import ReplayMeasure, judge_replays

SLO_ = SLO(tbt_s=0.025, ttft_s=0.5)


def records(gap_s: float, ttft_s: float, *, n: int = 200, seed: int = 0) -> list[RequestRecord]:
    """``n`` requests 0.1 s apart, 40 tokens each, gaps around ``gap_s`` and TTFTs around
    ``ttft_s`` (2% spread)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sent = 0.1 * i
        first = sent + ttft_s * rng.normal(1.0, 0.02)
        gaps = gap_s * rng.normal(1.0, 0.02, 39)
        times = first + np.concatenate([[0.0], np.cumsum(gaps)])
        out.append(RequestRecord(i, 100, 40, sent, sent, times))
    return out


def test_far_from_both_slos_is_a_clear_pass() -> None:
    verdict = judge_replays([ReplayMeasure(records(0.010, 0.1), complete=True)], SLO_)
    assert verdict.ok and verdict.confidence is Confidence.CLEAR and verdict.replays == 1
    assert verdict.tbt.low_s <= verdict.tbt.estimate_s <= verdict.tbt.high_s < 0.025


def test_a_p99_at_its_slo_is_marginal() -> None:
    measured = records(0.020, 0.1)
    estimate = judge_replays([ReplayMeasure(measured, complete=True)], SLO_).tbt.estimate_s
    at_own = SLO(tbt_s=estimate, ttft_s=0.5)
    verdict = judge_replays([ReplayMeasure(measured, complete=True)], at_own)
    assert verdict.tbt_ok and verdict.confidence is Confidence.MARGINAL


def test_a_fail_is_decided_by_the_slo_it_breaks_only() -> None:
    # TBT far above its SLO; TTFT at its own: the fail is clear (a TBT failure alone rules out
    # every larger budget), whatever the TTFT interval says.
    measured = records(0.060, 0.5)
    ttft = judge_replays([ReplayMeasure(measured, complete=True)], SLO_).ttft.estimate_s
    verdict = judge_replays([ReplayMeasure(measured, complete=True)], SLO(0.025, ttft))
    assert not verdict.tbt_ok and verdict.ttft_ok
    assert verdict.confidence is Confidence.CLEAR
    # TTFT broken at its own p99: that failure could prune smaller budgets, so it decides too
    verdict = judge_replays([ReplayMeasure(measured, complete=True)], SLO(0.025, ttft * 0.999))
    assert not verdict.ttft_ok and verdict.confidence is Confidence.MARGINAL


def test_an_early_stopped_replay_judges_only_what_it_proved() -> None:
    measured = records(0.060, 0.5)[:50]
    ttft = judge_replays([ReplayMeasure(measured, complete=True)], SLO_).ttft.estimate_s
    stopped = ReplayMeasure(measured, complete=False, tbt_certain_fail=True)
    verdict = judge_replays([stopped], SLO(0.025, ttft * 0.999))
    # the TTFT it cut short counts as met and decides nothing
    assert not verdict.tbt_ok and verdict.ttft_ok and verdict.confidence is Confidence.CLEAR


def test_replays_pool_and_widen_to_their_spread() -> None:
    first, second = records(0.020, 0.1, seed=1), records(0.022, 0.1, seed=2)
    one = judge_replays([ReplayMeasure(first, complete=True)], SLO_)
    both = judge_replays(
        [ReplayMeasure(first, complete=True), ReplayMeasure(second, complete=True)], SLO_
    )
    assert both.replays == 2 and both.tbt.samples == 2 * one.tbt.samples
    second_alone = judge_replays([ReplayMeasure(second, complete=True)], SLO_)
    assert both.tbt.high_s >= second_alone.tbt.estimate_s
    assert both.tbt.low_s <= one.tbt.estimate_s
