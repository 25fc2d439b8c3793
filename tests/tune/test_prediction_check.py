"""Measured against predicted p99 TBT over a sweep's verified budgets: within 30% the predictions
are figures; beyond it (the vLLM CPU build: 11.8 ms measured, 4.7 ms predicted, issue 15) the
sweep says they are an ordering only, with the ratio it measured."""

from __future__ import annotations

import dataclasses

import pytest

from budgettune.tune.point import PercentilesMs, Point, Predicted, Role, Status, SummaryMs
from budgettune.tune.prediction_check import check_predictions

NONE = PercentilesMs(None, None, None, None, None)


def point(budget: int, measured_ms: float | None, predicted_ms: float | None) -> Point:
    predicted = Predicted(SummaryMs(NONE, NONE, NONE, NONE, None, 0, 0), predicted_ms, 100.0, 8)
    return Point(
        budget=budget, role=Role("candidate"), rate_per_s=4.0, predicted=predicted,
        status=Status.MEASURED, tbt_ms=measured_ms, ttft_ms=100.0, tbt_ok=True, ttft_ok=True,
        ok=True, wall_s=1.0, complete=True,
    )  # fmt: skip


def test_a_cpu_sweep_is_an_ordering_only_with_its_ratio() -> None:
    check = check_predictions([point(256, 11.8, 4.7), point(1024, 30.0, 11.0)])
    assert check is not None and check.ordering_only
    assert check.ratio == pytest.approx((11.8 / 4.7 + 30.0 / 11.0) / 2)
    assert check.worst_budget == 1024 and check.budgets == (256, 1024)
    sentence = check.sentence(99)
    assert sentence.startswith("predictions on this hardware are an ordering only")
    assert "measured p99 TBT is 2.62x the predicted" in sentence
    assert "budget 1024: 30 ms measured, 11 ms predicted" in sentence


def test_within_30_percent_the_predictions_are_figures() -> None:
    check = check_predictions([point(512, 22.6, 22.6), point(1024, 29.5, 24.0)])
    assert check is not None and not check.ordering_only
    assert check.sentence(99).startswith("predictions agree with the measurements within 30%")
    low = check_predictions([point(512, 10.0, 20.0)])  # half the prediction: off too
    assert low is not None and low.ordering_only


def test_only_points_with_both_figures_and_complete_ones_first() -> None:
    assert check_predictions([point(512, None, 10.0), point(1024, 10.0, None)]) is None
    early = dataclasses.replace(point(2048, 100.0, 10.0), complete=False)
    check = check_predictions([point(512, 10.0, 10.0), early])
    assert check is not None and check.budgets == (512,)  # the replay stopped early is left out
    only_early = check_predictions([early])
    assert only_early is not None and only_early.ratio == pytest.approx(10.0)
