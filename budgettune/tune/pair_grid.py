"""The two-knob search's grid as measured: every (budget, max-num-seqs) pair's prediction, the
points measured, what the search proved, and how ``recommendation.json`` records it."""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.fields import Fields
from budgettune.core.units import ms_or_none
from budgettune.tune.pair_search import PairState
from budgettune.tune.point import Point
from budgettune.tune.predict import Prediction

PAIRS_KEY = "pairs"  # recommendation.json: every pair predicted, and what was measured


@dataclass(slots=True)
class PairsOutcome:
    """The two-knob search's grid: budgets and max-num-seqs values (ascending), the prediction
    of every pair, the points measured (by max-num-seqs value, then budget), the search's state
    and the engine launches it made."""

    budgets: tuple[int, ...]
    seqs_values: tuple[int, ...]
    predictions: dict[tuple[int, int], Prediction]  # (budget, max-num-seqs) -> prediction
    measured: dict[int, dict[int, Point]]
    state: PairState
    launches: int = 0
    by_goodput: bool = False  # --goodput: the answer is the pair with the highest goodput

    @property
    def chosen(self) -> tuple[int, int] | None:
        """(budget, max-num-seqs) of the answer (None: no pair meets both SLOs): by the budget
        rule (:attr:`PairState.best`), or with ``by_goodput`` the measured pair that meets both
        SLOs with the highest goodput (ties: the larger budget, then max-num-seqs)."""
        if self.by_goodput:
            rated = self.by_rate()
            return None if not rated else (rated[0][1], rated[0][2])
        best = self.state.best
        return None if best is None else (self.budgets[best[0]], self.seqs_values[best[1]])

    def by_rate(self) -> list[tuple[float, int, int]]:
        """(goodput req/s, budget, max-num-seqs) of every measured pair that meets both SLOs
        and has a goodput, highest first (ties: the larger budget, then max-num-seqs)."""
        return sorted(
            ((point.goodput.rate_per_s, budget, seqs)
             for seqs, by_budget in self.measured.items()
             for budget, point in by_budget.items()
             if point.ok and point.goodput is not None),
            reverse=True,
        )  # fmt: skip

    def grid(self) -> PairGrid:
        """What recommendation.json records of the search: one cell per pair."""
        cells = []
        for (budget, seqs), prediction in sorted(self.predictions.items()):
            point = self.measured[seqs].get(budget)
            measured = point is not None and point.is_measured
            cells.append(PairCell(
                budget=budget,
                max_num_seqs=seqs,
                predicted_tbt_ms=ms_or_none(prediction.tbt_s),
                predicted_ttft_ms=ms_or_none(prediction.ttft_s),
                measured=measured,
                status=None if point is None else point.status.value,
                tbt_ms=None if point is None else point.tbt_ms,
                ttft_ms=None if point is None else point.ttft_ms,
                ok=point.ok if point is not None and measured else None,
                goodput_per_s=(
                    None if point is None or point.goodput is None else point.goodput.rate_per_s
                ),
                feasible=self._feasible(
                    (self.budgets.index(budget), self.seqs_values.index(seqs))
                ),
            ))  # fmt: skip
        return PairGrid(self.budgets, self.seqs_values, self.chosen, self.launches, tuple(cells))

    def _feasible(self, pair: tuple[int, int]) -> bool | None:
        """Whether a pair meets both SLOs as the measurements imply; None (not known) for a pair
        the engine refuses, which no neighbour speaks for."""
        return None if pair in self.state.refused else self.state.feasible(pair)

    def to_json(self) -> dict[str, object]:
        """recommendation.json's ``pairs``."""
        return self.grid().to_json()


@dataclass(slots=True, frozen=True)
class PairCell:
    """One pair of the grid as recorded: its prediction, and its measurement when it was
    launched (``status``: the point's, None when not launched). ``feasible``: whether it meets
    both SLOs, measured or implied by a measured neighbour (None: not known)."""

    budget: int
    max_num_seqs: int
    predicted_tbt_ms: float | None
    predicted_ttft_ms: float | None
    measured: bool
    status: str | None
    tbt_ms: float | None
    ttft_ms: float | None
    ok: bool | None
    feasible: bool | None
    goodput_per_s: float | None = None  # --goodput: its highest rate within both SLOs


@dataclass(slots=True, frozen=True)
class PairGrid:
    """The two-knob grid as recorded in recommendation.json's ``pairs``: budgets and max-num-seqs
    values ascending, the chosen (budget, max-num-seqs) or None, the engine launches made."""

    budgets: tuple[int, ...]
    seqs_values: tuple[int, ...]
    chosen: tuple[int, int] | None
    launches: int
    cells: tuple[PairCell, ...]

    def to_json(self) -> dict[str, object]:
        chosen = self.chosen
        return {
            "budgets": list(self.budgets),
            "max_num_seqs": list(self.seqs_values),
            "chosen": None if chosen is None else {"budget": chosen[0], "max_num_seqs": chosen[1]},
            "launches": self.launches,
            "grid_launches": len(self.budgets) * len(self.seqs_values),
            "entries": [
                {
                    "budget": c.budget,
                    "max_num_seqs": c.max_num_seqs,
                    "predicted_tbt_ms": c.predicted_tbt_ms,
                    "predicted_ttft_ms": c.predicted_ttft_ms,
                    "measured": c.measured,
                    "status": c.status,
                    "tbt_ms": c.tbt_ms,
                    "ttft_ms": c.ttft_ms,
                    "ok": c.ok,
                    "feasible": c.feasible,
                    "goodput_per_s": c.goodput_per_s,
                    "folder": None if c.status is None else f"seqs-{c.max_num_seqs}",
                }
                for c in self.cells
            ],
        }


def read_pair_grid(fields: Fields) -> PairGrid:
    """recommendation.json's ``pairs``, validated (UserError naming the field otherwise): every
    figure in its range, every entry and the chosen pair on the grid, an entry for each pair."""
    budgets = tuple(_positive_ints(fields, "budgets"))
    seqs_values = tuple(_positive_ints(fields, "max_num_seqs"))
    chosen_fields = fields.child_or_none("chosen")
    chosen = (
        None
        if chosen_fields is None
        else (chosen_fields.integer("budget"), chosen_fields.integer("max_num_seqs"))
    )
    if chosen is not None and (chosen[0] not in budgets or chosen[1] not in seqs_values):
        fields.fail("chosen", "a pair of the grid's budgets and max_num_seqs", list(chosen))
    cells = []
    entries = fields.items("entries")
    if len(entries) != len(budgets) * len(seqs_values):
        fields.fail("entries", f"{len(budgets) * len(seqs_values)} pairs (the grid)", entries)
    for index, item in enumerate(entries):
        entry = Fields.of(item, f"{fields.where}.entries[{index}]")
        cells.append(PairCell(
            budget=entry.integer("budget", minimum=1),
            max_num_seqs=entry.integer("max_num_seqs", minimum=1),
            predicted_tbt_ms=entry.number_or_none("predicted_tbt_ms", minimum=0),
            predicted_ttft_ms=entry.number_or_none("predicted_ttft_ms", minimum=0),
            measured=entry.flag("measured"),
            status=entry.text_or_none("status"),
            tbt_ms=entry.number_or_none("tbt_ms", minimum=0),
            ttft_ms=entry.number_or_none("ttft_ms", minimum=0),
            ok=entry.flag_or_none("ok"),
            feasible=entry.flag_or_none("feasible"),
            goodput_per_s=entry.number_or_none("goodput_per_s", minimum=0),
        ))  # fmt: skip
        if cells[-1].budget not in budgets or cells[-1].max_num_seqs not in seqs_values:
            entry.fail("budget", "a pair of the grid's budgets and max_num_seqs", item)
    return PairGrid(
        budgets, seqs_values, chosen, fields.integer("launches", minimum=0), tuple(cells)
    )


def _positive_ints(fields: Fields, name: str) -> list[int]:
    values = fields.items(name)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        fields.fail(name, "a list of positive whole numbers", values)
    return [int(v) for v in values]


def seqs_candidates(decode_batch: float, engine_default: int) -> tuple[int, ...]:
    """``--max-num-seqs auto``: the values tuned with the budget, from the simulator's expected
    decode batch (running sequences, time-averaged, at the engine's own limit) and that limit.

    Powers of two from half the expected batch to four times it: below half, most requests
    queue for a slot (TTFT grows); past four times, the limit seldom binds and the engine runs
    as at its default. The engine's default closes the set, as the value today's sweeps hold.
    """
    low = max(1.0, decode_batch / 2)
    high = max(2.0, decode_batch * 4)
    values = {1 << k for k in range(21) if low <= (1 << k) <= high and (1 << k) < engine_default}
    return tuple(sorted({*values, engine_default}))
