"""Which budget to verify next: the upper end of the feasible interval with few engine launches.

Feasible budgets form an interval: a larger budget only lowers TTFT and only raises TBT. So a
TBT failure at budget i rules out every budget >= i, a TTFT failure every budget <= i, and a
pass proves the answer is >= i. The search starts where the simulator predicts the upper end
and moves by bisection, verifying the neighbour above the answer to show the cliff.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Verdict:
    """One live verification: did p99 TBT and p99 TTFT meet their SLOs?"""

    tbt_ok: bool
    ttft_ok: bool

    @property
    def ok(self) -> bool:
        return self.tbt_ok and self.ttft_ok


@dataclass(slots=True)
class SearchState:
    """What the verifications so far prove, over candidate indices 0..n-1."""

    n: int
    best_pass: int = -1  # largest index verified feasible
    tbt_fail_from: int = -1  # smallest index whose TBT failed (n if none yet)
    ttft_fail_upto: int = -1  # largest index whose TTFT failed
    verified: dict[int, Verdict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tbt_fail_from < 0:
            self.tbt_fail_from = self.n

    def record(self, index: int, verdict: Verdict) -> None:
        self.verified[index] = verdict
        if verdict.ok:
            self.best_pass = max(self.best_pass, index)
        if not verdict.tbt_ok:
            self.tbt_fail_from = min(self.tbt_fail_from, index)
        if not verdict.ttft_ok:
            self.ttft_fail_upto = max(self.ttft_fail_upto, index)

    def open_indices(self) -> list[int]:
        """Indices whose verification could still raise the answer."""
        low = max(self.best_pass, self.ttft_fail_upto)
        return [i for i in range(low + 1, self.tbt_fail_from) if i not in self.verified]

    def done(self) -> bool:
        """No open index left, and the neighbour above the answer was verified (if it exists)."""
        if self.open_indices():
            return False
        above = self.best_pass + 1
        return self.best_pass < 0 or above >= self.n or above in self.verified


def next_index(state: SearchState, predicted: Sequence[Verdict]) -> int | None:
    """The next candidate to verify, or None when the answer is proven.

    First the predicted upper end (the largest predicted-feasible index; with none, the end the
    failing SLO points to: the smallest budget when TBT fails, the largest when TTFT does);
    after that directly above the best pass when the prediction held, else the middle of what
    is still open (bisection).
    """
    if state.done():
        return None
    open_ = state.open_indices()
    if not open_:  # only the neighbour above the answer remains, to show the cliff
        return state.best_pass + 1
    if not state.verified:
        start = _predicted_start(predicted)
        return start if start in open_ else open_[len(open_) // 2]
    if len(state.verified) == 1 and state.best_pass >= 0 and open_[0] == state.best_pass + 1:
        # The predicted upper end held: one step up tells whether the real edge is higher.
        return open_[0]
    return open_[len(open_) // 2]


def next_indices(state: SearchState, predicted: Sequence[Verdict], slots: int) -> list[int]:
    """Up to ``slots`` candidates to verify at once (one round), or [] when the answer is
    proven. With one slot this is exactly :func:`next_index`.

    The first round takes the predicted upper end and its neighbours, alternating above and
    below (the one above shows the cliff). Later rounds take the neighbour above the best pass
    when it is still unverified, and cut what is still open into equal parts (k-section), so
    each round narrows the interval the most the slots allow.
    """
    if slots <= 1:
        index = next_index(state, predicted)
        return [] if index is None else [index]
    if state.done():
        return []
    open_ = state.open_indices()
    if not state.verified:
        start = _predicted_start(predicted)
        if start not in open_:
            start = open_[len(open_) // 2]
        order = [start]
        for step in range(1, state.n):
            order += [start + step, start - step]
        return sorted([i for i in order if i in open_][:slots])
    picks: list[int] = []
    above = state.best_pass + 1
    if state.best_pass >= 0 and above < state.n and above not in state.verified:
        picks.append(above)
    rest = [i for i in open_ if i not in picks]
    want = slots - len(picks)
    if want > 0 and rest:
        if len(rest) <= want:
            picks += rest
        else:  # k-section: the points that cut what is open into want + 1 equal parts
            chosen = {rest[round((j + 1) * (len(rest) - 1) / (want + 1))] for j in range(want)}
            picks += sorted(chosen)
    return sorted(set(picks))


def clear_fallback(state: SearchState, clear: set[int]) -> int | None:
    """When the search's answer (its best pass) is marginal: the largest candidate below it not
    yet verified and not ruled out by a TTFT failure, so that the verdict can name a budget that
    passed clearly. None when the answer is clear, a clear pass below it is known, or no
    candidate is left. ``clear``: the indices verified as clear passes."""
    best = state.best_pass
    if best < 0 or best in clear or any(i < best for i in clear):
        return None
    for index in range(best - 1, state.ttft_fail_upto, -1):
        if index not in state.verified:
            return index
    return None


def _predicted_start(predicted: Sequence[Verdict]) -> int:
    feasible = [i for i, verdict in enumerate(predicted) if verdict.ok]
    if feasible:
        return feasible[-1]
    if predicted and all(not v.tbt_ok for v in predicted):
        return 0
    if predicted and all(not v.ttft_ok for v in predicted):
        return len(predicted) - 1
    return len(predicted) // 2


def search(n: int, predicted: Sequence[Verdict], verify: Callable[[int], Verdict]) -> SearchState:
    """Run the search to the end with a ``verify(index) -> Verdict`` callback (one launch each)."""
    state = SearchState(n=n)
    while (index := next_index(state, predicted)) is not None:
        state.record(index, verify(index))
    return state
