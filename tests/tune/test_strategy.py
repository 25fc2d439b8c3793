"""The verification order: it always finds the true upper end of the feasible interval, and
with an accurate prediction it needs two launches."""

from __future__ import annotations

from budgettune.tune.strategy import Verdict, search


def interval_oracle(low: int, high: int):
    """Budgets [low, high) are feasible: TTFT fails below low, TBT fails from high on."""
    calls: list[int] = []

    def verify(index: int) -> Verdict:
        calls.append(index)
        return Verdict(tbt_ok=index < high, ttft_ok=index >= low)

    return verify, calls


def predicted_interval(n: int, low: int, high: int) -> list[Verdict]:
    """Predictions saying budgets (low, high] are feasible: TTFT fails at or below low, TBT
    above high."""
    return [Verdict(tbt_ok=i <= high, ttft_ok=i > low) for i in range(n)]


def test_finds_upper_end_for_every_interval_and_prediction() -> None:
    for n in range(1, 11):
        for low in range(n + 1):
            for high in range(low, n + 1):
                truth = high - 1 if high > low else -1
                for predicted_end in range(-1, n):
                    verify, calls = interval_oracle(low, high)
                    state = search(n, predicted_interval(n, -1, predicted_end), verify)
                    assert state.best_pass == truth, (n, low, high, predicted_end)
                    assert len(calls) == len(set(calls)), "no budget is launched twice"
                    if truth >= 0 and truth + 1 < n:
                        assert truth + 1 in state.verified, "the cliff above is shown"


def test_accurate_prediction_needs_two_launches() -> None:
    n = 10
    for high in range(1, n):
        verify, calls = interval_oracle(0, high)
        search(n, predicted_interval(n, -1, high - 1), verify)
        assert calls == [high - 1, high]


def test_worst_case_is_logarithmic_not_a_grid() -> None:
    n = 32
    worst = 0
    for high in range(n + 1):
        for predicted_end in range(-1, n):
            verify, calls = interval_oracle(0, high)
            search(n, predicted_interval(n, -1, predicted_end), verify)
            worst = max(worst, len(calls))
    assert worst <= 8  # bisection over 32 plus the first guess and the cliff


def test_nothing_feasible_when_both_slos_fail_at_one_budget() -> None:
    verify, calls = interval_oracle(5, 3)  # TTFT needs >= 5, TBT needs < 3
    state = search(8, predicted_interval(8, -1, 7), verify)
    assert state.best_pass == -1
    assert len(calls) <= 4


def test_nothing_predicted_feasible_starts_where_the_failing_slo_points() -> None:
    # TBT fails everywhere in the prediction: start at the smallest budget, where TBT is best
    verify, calls = interval_oracle(0, 0)
    state = search(6, [Verdict(tbt_ok=False, ttft_ok=True)] * 6, verify)
    assert calls == [0] and state.best_pass == -1
    # TTFT fails everywhere: start at the largest
    verify, calls = interval_oracle(6, 6)
    state = search(6, [Verdict(tbt_ok=True, ttft_ok=False)] * 6, verify)
    assert calls == [5] and state.best_pass == -1
