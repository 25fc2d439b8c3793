"""The two-knob search (budget x max-num-seqs) against the grid: on every grid whose verdicts
follow the two knobs' rules (either knob larger: TBT only worse, TTFT only better), it returns
the pair the exhaustive grid picks, and with the simulator's verdicts as its guide it verifies
at most half the grid."""

from __future__ import annotations

import random

import pytest

from budgettune.tune.pair_grid import seqs_candidates
from budgettune.tune.pair_search import Pair, PairState, next_pair, search_pairs
from budgettune.tune.strategy import Verdict

Grid = dict[Pair, Verdict]


def monotone_grid(n_budgets: int, n_seqs: int, rng: random.Random) -> Grid:
    """Random verdicts obeying the rules: TBT holds up to a budget that falls as max-num-seqs
    rises; TTFT holds from a budget that also falls as max-num-seqs rises."""
    tbt_up_to = sorted((rng.randint(-1, n_budgets - 1) for _ in range(n_seqs)), reverse=True)
    ttft_from = sorted((rng.randint(0, n_budgets) for _ in range(n_seqs)), reverse=True)
    return {
        (i, j): Verdict(i <= tbt_up_to[j], i >= ttft_from[j])
        for i in range(n_budgets)
        for j in range(n_seqs)
    }


def grid_answer(grid: Grid) -> Pair | None:
    """What the exhaustive grid picks: the largest budget meeting both SLOs at some
    max-num-seqs, then the largest max-num-seqs meeting both at it."""
    feasible = [pair for pair, verdict in grid.items() if verdict.ok]
    return max(feasible) if feasible else None


@pytest.mark.parametrize(("n_budgets", "n_seqs"), [(4, 3), (6, 3), (8, 4), (4, 4)])
def test_the_search_finds_the_grids_pair_with_at_most_half_its_launches(
    n_budgets: int, n_seqs: int
) -> None:
    rng = random.Random(n_budgets * 100 + n_seqs)
    most = 0
    for _ in range(300):
        truth = monotone_grid(n_budgets, n_seqs, rng)
        state = search_pairs(n_budgets, n_seqs, truth, truth.__getitem__)
        assert state.best == grid_answer(truth), truth
        assert state.best is None or state.best in state.verified  # the answer is measured
        most = max(most, len(state.verified))
    assert most <= n_budgets * n_seqs // 2


def test_a_wrong_prediction_costs_launches_not_the_answer() -> None:
    rng = random.Random(7)
    for _ in range(300):
        truth, guess = monotone_grid(4, 3, rng), monotone_grid(4, 3, rng)
        state = search_pairs(4, 3, guess, truth.__getitem__)
        assert state.best == grid_answer(truth)


def test_one_verdict_settles_a_quadrant() -> None:
    state = PairState(4, 3)
    state.record((1, 1), Verdict(tbt_ok=False, ttft_ok=True))
    # TBT broken at (1, 1): broken wherever both knobs are at least as large
    assert state.feasible((3, 2)) is False and state.feasible((1, 1)) is False
    # ... TTFT holding there says nothing of TBT below it
    assert state.known((0, 0)) == (None, None) and state.known((2, 2)) == (False, True)
    state.record((0, 0), Verdict(tbt_ok=True, ttft_ok=False))
    assert state.best is None and state.known((0, 0)) == (True, False)


def test_the_answers_cliff_neighbours_are_verified_on_both_knobs() -> None:
    truth = {(i, j): Verdict(i + j <= 2, True) for i in range(4) for j in range(3)}
    state = search_pairs(4, 3, truth, truth.__getitem__)
    assert state.best == (2, 0) == grid_answer(truth)
    assert (3, 0) in state.verified and (2, 1) in state.verified
    assert next_pair(state, truth) is None


def test_no_feasible_pair_ends_the_search_with_no_answer() -> None:
    truth = {(i, j): Verdict(False, True) for i in range(4) for j in range(3)}
    state = search_pairs(4, 3, truth, truth.__getitem__)
    assert state.best is None and len(state.verified) <= 2


@pytest.mark.parametrize(
    ("decode_batch", "engine_default", "values"),
    [
        (13.0, 256, (8, 16, 32, 256)),  # powers of two in [6.5, 52], then the engine's own
        (0.5, 256, (1, 2, 256)),  # at least one running sequence
        (100.0, 256, (64, 128, 256)),  # 256 is both in range and the default: once
        (3000.0, 1024, (1024,)),  # never above the engine's own limit (its memory plan)
    ],
)
def test_auto_values_span_the_expected_decode_batch(
    decode_batch: float, engine_default: int, values: tuple[int, ...]
) -> None:
    assert seqs_candidates(decode_batch, engine_default) == values


def test_pairs_the_engine_refuses_are_never_launched_nor_the_answer() -> None:
    # budgets 256, 512, 2048 against max-num-seqs 64, 1024: vLLM refuses a budget below a given
    # max-num-seqs, so (256, 1024) and (512, 1024) are never launched, however the verdicts of
    # their neighbours would place them; on the grid the answer is the largest taken pair.
    refused = frozenset({(0, 1), (1, 1)})
    rng = random.Random(7)
    for _ in range(200):
        grid = monotone_grid(3, 2, rng)
        launched: list[Pair] = []

        def verify(pair: Pair, grid: Grid = grid, launched: list[Pair] = launched) -> Verdict:
            launched.append(pair)
            return grid[pair]

        state = search_pairs(3, 2, grid, verify, refused=refused)
        assert not refused & set(launched)
        taken = {pair: verdict for pair, verdict in grid.items() if pair not in refused}
        assert state.best == grid_answer(taken)
