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


def test_a_marginal_answer_sends_the_search_below_it_until_a_clear_pass() -> None:
    from budgettune.tune.strategy import SearchState, clear_fallback

    state = SearchState(n=5)
    for index, verdict in ((3, Verdict(True, True)), (4, Verdict(False, True))):
        state.record(index, verdict)
    assert clear_fallback(state, clear={3}) is None  # the answer itself is clear
    assert clear_fallback(state, clear=set()) == 2  # marginal: the next one down
    state.record(2, Verdict(True, True))
    assert clear_fallback(state, clear=set()) == 1  # marginal too: further down
    assert clear_fallback(state, clear={2}) is None  # a clear pass below the answer is known
    state.record(1, Verdict(True, False))  # TTFT fails at 1: nothing below it can pass
    assert clear_fallback(state, clear=set()) is None
    assert clear_fallback(SearchState(n=3), clear=set()) is None  # no pass at all


def search_in_rounds(n, predicted, verify, slots):
    """The search with ``slots`` verifications a round; returns (state, rounds)."""
    from budgettune.tune.strategy import SearchState, next_indices

    state = SearchState(n=n)
    rounds = 0
    while indices := next_indices(state, predicted, slots):
        rounds += 1
        assert len(indices) <= slots and not set(indices) & set(state.verified)
        for index in indices:
            state.record(index, verify(index))
    return state, rounds


def test_rounds_of_several_slots_find_the_same_upper_end() -> None:
    for slots in (2, 3, 4):
        for n in range(1, 11):
            for low in range(n + 1):
                for high in range(low, n + 1):
                    truth = high - 1 if high > low else -1
                    for predicted_end in range(-1, n):
                        verify, calls = interval_oracle(low, high)
                        predicted = predicted_interval(n, -1, predicted_end)
                        state, rounds = search_in_rounds(n, predicted, verify, slots)
                        assert state.best_pass == truth, (slots, n, low, high, predicted_end)
                        assert len(calls) == len(set(calls)), "no budget is launched twice"
                        if truth >= 0 and truth + 1 < n:
                            assert truth + 1 in state.verified, "the cliff above is shown"
                        verify1, _ = interval_oracle(low, high)
                        _, sequential = search_in_rounds(n, predicted, verify1, 1)
                        assert rounds <= sequential


def test_one_slot_rounds_are_the_sequential_search() -> None:
    n = 12
    for high in range(n + 1):
        for predicted_end in range(-1, n):
            predicted = predicted_interval(n, -1, predicted_end)
            verify, calls = interval_oracle(0, high)
            search(n, predicted, verify)
            verify_r, calls_r = interval_oracle(0, high)
            search_in_rounds(n, predicted, verify_r, 1)
            assert calls_r == calls


def test_four_slots_halve_the_rounds_when_the_prediction_is_near() -> None:
    # Seeded by the prediction (its edge and the neighbours): an accurate one takes a single
    # round instead of two, and over predictions off by up to two candidates either way, four
    # slots need well under half the rounds (measured: 0.37 of them). A prediction far off can
    # take more than half (3 rounds against 2 when the answer is 0 and the guess 2): a round
    # cannot verify what it does not yet know to be open.
    n = 13
    one_total = four_total = 0
    for high in range(1, n + 1):
        accurate = predicted_interval(n, -1, high - 1)
        _, four = search_in_rounds(n, accurate, interval_oracle(0, high)[0], 4)
        _, one = search_in_rounds(n, accurate, interval_oracle(0, high)[0], 1)
        assert four == 1 and one == (2 if high < n else 1)
        for predicted_end in range(max(-1, high - 3), min(n, high + 2)):
            predicted = predicted_interval(n, -1, predicted_end)
            one_total += search_in_rounds(n, predicted, interval_oracle(0, high)[0], 1)[1]
            four_total += search_in_rounds(n, predicted, interval_oracle(0, high)[0], 4)[1]
    assert four_total <= 0.5 * one_total, (four_total, one_total)
