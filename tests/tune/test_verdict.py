"""The verdict's choice and reasons, from hand-made points."""

from __future__ import annotations

import dataclasses
from typing import Any

from budgettune.tune.candidates import Candidates
from budgettune.tune.point import PercentilesMs, Point, Predicted, Role, Status, SummaryMs
from budgettune.tune.select import recommend

CANDIDATES = Candidates(
    budgets=(512, 1024, 1536), floor_tokens=512, ceiling_tokens=1024, decode_batch=8,
    ridge_tokens=221.0,
)  # fmt: skip


def point(budget: int, tbt_ms: float, ttft_ms: float, role: str = "candidate") -> Point:
    tbt_ok, ttft_ok = tbt_ms <= 50, ttft_ms <= 1000
    return Point(
        budget=budget, role=Role(role), rate_per_s=16.0, predicted=None, status=Status.MEASURED,
        tbt_ms=tbt_ms, ttft_ms=ttft_ms, tbt_ok=tbt_ok, ttft_ok=ttft_ok, ok=tbt_ok and ttft_ok,
        wall_s=1.0,
    )  # fmt: skip


def _summary(max_tbt_ms: float | None = None) -> SummaryMs:
    none = PercentilesMs(None, None, None, None, None)
    tbt = PercentilesMs(None, None, None, None, max_tbt_ms)
    return SummaryMs(none, tbt, none, none, None, 0, 0)


def choose(points: list[Point], default: int | None = 8192):
    return recommend(
        points, slo_tbt_s=0.05, slo_ttft_s=1.0, percentile=99, rate_per_s=16,
        default_budget=default, candidates=CANDIDATES,
    )  # fmt: skip


def test_largest_passing_budget_with_the_cliff_and_the_default() -> None:
    rec = choose([point(512, 20, 700), point(1024, 40, 500), point(1536, 61, 450),
                  point(8192, 200, 400, "reference")])  # fmt: skip
    assert rec.budget_tokens == 1024
    assert rec.headline.startswith("Recommended: 1024. p99 TBT 40.0 ms <= 50.0 ms")
    assert rec.reasons[0] == "1536 breaks p99 TBT (61.0 ms)."
    assert rec.reasons[1] == "Your engine default (8192) breaks p99 TBT (200 ms), 4.0x the TBT SLO."
    assert not any(r.startswith("Note:") for r in rec.reasons)


def test_nothing_feasible_names_the_binding_slo() -> None:
    tbt = choose([point(512, 60, 500), point(1024, 70, 400)])
    assert tbt.budget_tokens is None and tbt.binding_slo == "tbt"
    assert "TBT binds: even 512" in tbt.reasons[0]
    ttft = choose([point(512, 20, 3000), point(1024, 30, 2000)])
    assert ttft.binding_slo == "ttft" and "TTFT binds: even 1024" in ttft.reasons[0]
    both = choose([point(512, 20, 3000), point(1024, 70, 400)])
    assert both.binding_slo == "both"


def test_failed_engines_are_reported_not_chosen() -> None:
    crashed = Point(
        budget=1536, role=Role.CANDIDATE, rate_per_s=16.0, predicted=None, status=Status.CRASHED,
        tbt_ok=None, ttft_ok=None, ok=False, wall_s=1.0, error="engine exited with status -9",
    )  # fmt: skip
    rec = choose([point(512, 20, 700), point(1024, 40, 500), crashed], default=None)
    assert rec.budget_tokens == 1024
    assert any("Budget 1536: crashed (engine exited with status -9)" in r for r in rec.reasons)


def test_measurements_that_break_monotonicity_are_flagged() -> None:
    # 1024 met TTFT but the larger 1536 missed it: not how budgets behave, so noise is named
    rec = choose([point(1024, 40, 500), point(1536, 45, 2700)], default=None)
    assert rec.budget_tokens == 1024
    assert any(r.startswith("Note: p99 TTFT does not move monotonically") for r in rec.reasons)


def with_prediction(pt: Point, predicted_tbt_ms: float, max_tbt_ms: float | None = None) -> Point:
    predicted = Predicted(_summary(), predicted_tbt_ms, None, 8.0)
    measured = _summary(max_tbt_ms) if max_tbt_ms is not None else None
    return dataclasses.replace(pt, predicted=predicted, measured=measured)


def test_a_default_passing_above_the_tbt_cliff_is_reported_not_recommended() -> None:
    # The README's first command: 1792 breaks p99 TBT but the default 8192 passes, because few
    # iterations fill 8192 with that traffic; the simulator predicts the same order.
    rec = choose([
        with_prediction(point(1536, 43.6, 263), 43.1),
        with_prediction(point(1792, 50.3, 264), 50.4),
        with_prediction(point(8192, 46.1, 261, "reference"), 47.4, max_tbt_ms=252.5),
    ])  # fmt: skip
    assert rec.budget_tokens == 1536
    assert rec.reasons[0] == "1792 breaks p99 TBT (50.3 ms)."
    assert rec.reasons[1].startswith(
        "Your engine default (8192) meets both SLOs too (p99 TBT 46.1 ms, max 252 ms), but 1792 "
        "below it breaks p99 TBT"
    )
    assert "1536 is the safer choice" in rec.reasons[1]
    assert len(rec.reasons) == 2, "predicted by the simulator too: no note blaming noise"


def test_an_unpredicted_tbt_reversal_is_still_flagged_as_noise() -> None:
    rec = choose([
        with_prediction(point(1024, 40, 500), 38),
        with_prediction(point(1536, 55, 450), 45),
        with_prediction(point(8192, 48, 400, "reference"), 200),
    ])  # fmt: skip
    assert rec.budget_tokens == 1024
    assert any(r.startswith("Note: p99 TBT does not move monotonically") for r in rec.reasons)


def test_only_passes_above_a_tbt_failure_still_recommend_the_largest() -> None:
    rec = choose([point(512, 60, 500), point(8192, 45, 300, "reference")])
    assert rec.budget_tokens == 8192
    assert rec.reasons[0].startswith("512 breaks p99 TBT, yet the larger 8192 meets it")


def test_the_load_names_the_asked_rate_when_the_schedule_realised_another() -> None:
    points = [point(512, 20, 700), point(1024, 40, 500)]
    kwargs: dict[str, Any] = dict(slo_tbt_s=0.05, slo_ttft_s=1.0, percentile=99,
                                  default_budget=None, candidates=CANDIDATES)  # fmt: skip
    # a short Poisson schedule asked for 8 req/s realised 7.16 over its 240 requests (10.5% off)
    rec = recommend(points, rate_per_s=7.16, asked_rate_per_s=8, requests=240, **kwargs)
    assert rec.headline.endswith("at 8 req/s (7.16 realised over 240 requests).")
    # within 2%, the realised rate is the asked one and stands alone
    close = recommend(points, rate_per_s=7.9, asked_rate_per_s=8, requests=240, **kwargs)
    assert close.headline.endswith("at 7.9 req/s.")
    # a trace replayed at its own rate asked for none
    assert recommend(points, rate_per_s=7.16, **kwargs).headline.endswith("at 7.16 req/s.")
    both = recommend([point(512, 20, 3000), point(1024, 70, 400)], rate_per_s=7.16,
                     asked_rate_per_s=8, requests=240, **kwargs)  # fmt: skip
    assert "The load (8 req/s (7.16 realised over 240 requests)) is too high" in both.reasons[0]


def test_a_marginal_answer_says_so_and_names_the_clear_pass_below() -> None:
    from budgettune.core.confidence import Confidence

    clear_512 = dataclasses.replace(
        point(512, 20, 700), confidence=Confidence.CLEAR, tbt_ci_ms=(19.0, 21.0)
    )
    marginal_1024 = dataclasses.replace(
        point(1024, 49, 500), confidence=Confidence.MARGINAL, tbt_ci_ms=(46.0, 53.5), replays=3
    )
    rec = choose([clear_512, marginal_1024, point(1536, 61, 450)], default=None)
    assert rec.budget_tokens == 1024
    marginal = next(r for r in rec.reasons if "marginal" in r)
    assert marginal.startswith(
        "The pass at 1024 is marginal after 3 replays: p99 TBT 49.0 ms (95% interval "
        "46.0-53.5 ms) against 50.0 ms; another run may break it."
    )
    assert "512 passed clearly (p99 TBT 20.0 ms, p99 TTFT 700 ms)" in marginal
    alone = choose([dataclasses.replace(marginal_1024, replays=1)], default=None)
    assert any(r.endswith("No smaller budget passed clearly.") for r in alone.reasons)
    assert not any("marginal" in r for r in choose([clear_512], default=None).reasons)


def test_a_cache_gap_is_explained_by_the_simulator_when_it_finds_as_little() -> None:
    from budgettune.core.cache_count import PrefixCacheCount

    def cached(budget: int, share: float, predicted: float | None) -> Point:
        found = PrefixCacheCount(queries_tokens=7200, hits_tokens=round(7200 * share))
        guess = None if predicted is None else Predicted(_summary(), 10.0, 100.0, 2.0, predicted)
        return dataclasses.replace(point(budget, 20, 500), prefix_cache=found, predicted=guess)

    def gap_reasons(pt: Point) -> list[str]:
        rec = recommend(
            [pt], slo_tbt_s=0.05, slo_ttft_s=1.0, percentile=99, rate_per_s=16,
            default_budget=None, candidates=CANDIDATES, expected_hit_share=0.533,
        )  # fmt: skip
        return [r for r in rec.reasons if "cached" in r]

    # SGLang on pairs of simultaneous requests: the simulator also finds little
    (together,) = gap_reasons(cached(512, 0.213, 0.107))
    assert "the simulator finds 10.7% on the same arrivals" in together
    # the simulator found the traffic's share, the engine did not: its cache let them go
    (evicted,) = gap_reasons(cached(512, 0.213, 0.53))
    assert "too small for the shared prefixes, or evicted them" in evicted
    assert gap_reasons(cached(512, 0.53, 0.53)) == []
