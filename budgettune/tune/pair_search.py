"""Which (budget, max-num-seqs) pair to verify next: the two-knob search.

Both knobs act the same way on the two SLOs. A larger budget puts a larger prefill chunk beside
the decodes; a larger max-num-seqs puts more decodes in each iteration. Either only raises TBT.
Either only lowers TTFT: a larger chunk finishes a prompt in fewer iterations, and more running
slots leave fewer requests queued for one. So one verification says something about a quadrant
of the grid, not only about its own pair:

- TBT broken at (b, s): broken at every pair with both knobs at least as large;
- TTFT broken at (b, s): broken at every pair with both knobs at most as large;
- a pass at (b, s): TBT holds at every pair below it, TTFT at every pair above it.

The answer follows the budget rule first: the largest budget that meets both SLOs at some
max-num-seqs, then, at that budget, the largest max-num-seqs that still meets both (the most
headroom for bursts). The search starts at the pair the simulator predicts is the answer, then
verifies the pair whose outcome settles the most pairs that could still beat the answer (in its
worst case), and ends with the neighbours above the answer on each knob verified, to show the
cliff. Grid indices: ``(i, j)``, budget ``i`` and max-num-seqs ``j``, each ascending.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from budgettune.tune.strategy import Verdict

Pair = tuple[int, int]  # (budget index, max-num-seqs index)


@dataclass(slots=True)
class PairState:
    """What the verifications so far prove over an ``n_budgets`` x ``n_seqs`` grid."""

    n_budgets: int
    n_seqs: int
    verified: dict[Pair, Verdict] = field(default_factory=dict)
    failed: set[Pair] = field(default_factory=set)  # its engine failed: no verdict, left out
    # pairs the engine refuses (vLLM: a budget below max-num-seqs): never launched, never the
    # answer, whatever their neighbours imply
    refused: frozenset[Pair] = frozenset()

    def record(self, pair: Pair, verdict: Verdict | None) -> None:
        """A verification's verdict (None: the engine failed at the pair, which says nothing
        of its neighbours and is not tried again)."""
        if verdict is None:
            self.failed.add(pair)
        else:
            self.verified[pair] = verdict

    def pairs(self) -> Iterator[Pair]:
        return ((i, j) for i in range(self.n_budgets) for j in range(self.n_seqs))

    def known(self, pair: Pair) -> tuple[bool | None, bool | None]:
        """(TBT holds, TTFT holds) at ``pair`` as the verifications imply (None: not known)."""
        i, j = pair
        tbt: bool | None = None
        ttft: bool | None = None
        for (vi, vj), verdict in self.verified.items():
            above = vi <= i and vj <= j  # pair is at or above the verified one on both knobs
            below = vi >= i and vj >= j
            if above and not verdict.tbt_ok:
                tbt = False
            elif below and verdict.tbt_ok and tbt is None:
                tbt = True
            if below and not verdict.ttft_ok:
                ttft = False
            elif above and verdict.ttft_ok and ttft is None:
                ttft = True
        return tbt, ttft

    def feasible(self, pair: Pair) -> bool | None:
        """Whether ``pair`` meets both SLOs (None: not known yet)."""
        tbt, ttft = self.known(pair)
        if tbt is False or ttft is False:
            return False
        if tbt and ttft:
            return True
        return None

    @property
    def best(self) -> Pair | None:
        """The answer so far: the largest budget proven feasible, then the largest
        max-num-seqs proven feasible at it (None: no pair proven feasible)."""
        proven = [pair for pair in self.pairs() if pair not in self.refused and self.feasible(pair)]
        return max(proven) if proven else None

    def open_pairs(self) -> list[Pair]:
        """Pairs not yet settled that would beat the answer if feasible."""
        best = self.best
        return [
            pair
            for pair in self.pairs()
            if (best is None or pair > best)
            and self.feasible(pair) is None
            and pair not in self.failed
            and pair not in self.refused
        ]

    def cliff_pairs(self) -> list[Pair]:
        """The answer itself, when only inferred from its neighbours, and its neighbours above it
        on each knob, those not yet verified themselves: a recommended pair is measured, and
        so is the cliff beside it."""
        best = self.best
        if best is None:
            return []
        i, j = best
        return [
            pair
            for pair in ((i, j), (i + 1, j), (i, j + 1))
            if pair[0] < self.n_budgets
            and pair[1] < self.n_seqs
            and pair not in self.verified
            and pair not in self.failed
            and pair not in self.refused
        ]

    def done(self) -> bool:
        return not self.open_pairs() and not self.cliff_pairs()


def next_pair(state: PairState, predicted: Mapping[Pair, Verdict]) -> Pair | None:
    """The next pair to verify, or None when the answer is proven.

    First the predicted answer (with none predicted feasible, the middle of the grid); then,
    while a pair could still beat the answer, the one whose verification settles the most such
    pairs in its worst case (ties: the most if the prediction holds there, then the larger);
    last the cliff neighbours of the answer."""
    if state.done():
        return None
    open_ = state.open_pairs()
    if not state.verified:
        start = _predicted_answer(state, predicted)
        return start if start in open_ else open_[len(open_) // 2]
    if not open_:
        return state.cliff_pairs()[0]
    return max(open_, key=lambda pair: (_settled(state, pair, open_),
                                        _settled(state, pair, open_, predicted.get(pair)),
                                        pair))  # fmt: skip


def next_pairs(state: PairState, predicted: Mapping[Pair, Verdict], k: int) -> list[Pair]:
    """Up to ``k`` pairs to verify side by side (``--parallel``): :func:`next_pair`, then
    again as if each pair picked had come out as predicted, so the picks are the ones the
    one-at-a-time search would verify next if the predictions held. Empty when the answer is
    proven; with ``k`` 1, exactly :func:`next_pair`."""
    ahead = PairState(
        state.n_budgets, state.n_seqs, dict(state.verified), set(state.failed), state.refused
    )
    picked: list[Pair] = []
    while len(picked) < k and (pair := next_pair(ahead, predicted)) is not None:
        picked.append(pair)
        ahead.record(pair, predicted.get(pair, Verdict(True, True)))
    return picked


def _predicted_ok(predicted: Mapping[Pair, Verdict], pair: Pair) -> bool:
    verdict = predicted.get(pair)
    return verdict is not None and verdict.ok


def _predicted_answer(state: PairState, predicted: Mapping[Pair, Verdict]) -> Pair:
    """The pair the prediction picks; with none feasible, the end its failing SLO points to:
    the smallest pair when TBT fails everywhere, the largest when TTFT does."""
    feasible = [pair for pair in state.pairs() if _predicted_ok(predicted, pair)]
    if feasible:
        return max(feasible)
    verdicts = [predicted[pair] for pair in state.pairs() if pair in predicted]
    if verdicts and not any(verdict.tbt_ok for verdict in verdicts):
        return (0, 0)
    if verdicts and not any(verdict.ttft_ok for verdict in verdicts):
        return (state.n_budgets - 1, state.n_seqs - 1)
    return (state.n_budgets // 2, state.n_seqs // 2)


def _settled(
    state: PairState, pair: Pair, open_: list[Pair], expected: Verdict | None = None
) -> int:
    """How many of ``open_`` a verification of ``pair`` settles: in its least telling outcome
    among those the verifications so far allow, or in the ``expected`` one (the prediction's)
    where it is among them."""
    tbt_known, ttft_known = state.known(pair)
    outcomes = [
        Verdict(tbt_ok, ttft_ok)
        for tbt_ok in ((True, False) if tbt_known is None else (tbt_known,))
        for ttft_ok in ((True, False) if ttft_known is None else (ttft_known,))
    ]
    if expected is not None and expected in outcomes:
        outcomes = [expected]
    counts = []
    for outcome in outcomes:
        trial = PairState(
            state.n_budgets, state.n_seqs, dict(state.verified), state.failed, state.refused
        )
        trial.record(pair, outcome)
        still_open = set(trial.open_pairs())
        counts.append(sum(1 for other in open_ if other not in still_open))
    return min(counts)


def search_pairs(
    n_budgets: int,
    n_seqs: int,
    predicted: Mapping[Pair, Verdict],
    verify: Callable[[Pair], Verdict | None],
    refused: frozenset[Pair] = frozenset(),
) -> PairState:
    """Run the search to the end with a ``verify(pair) -> Verdict`` callback (one launch each;
    None: the engine failed there), never at a ``refused`` pair."""
    state = PairState(n_budgets, n_seqs, refused=refused)
    while (pair := next_pair(state, predicted)) is not None:
        state.record(pair, verify(pair))
    return state
