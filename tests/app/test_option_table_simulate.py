"""The behaviour table for `simulate`: it starts no engine, so each option acts on the simulated
figures. Each row runs the same small workload twice, differing only in that option, and checks
that the figures moved the way the option means (or, for a count, equal it): a value lost between
the flag and the simulator leaves the two runs alike and fails its row by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from typer.testing import CliRunner

from budgettune.cli import app

BASE = ["simulate", "--requests", "30", "--rate", "8", "--seed", "1", "--budgets", "512",
        "--prompt-dist", "fixed:600", "--output-dist", "fixed:40", "--json"]  # fmt: skip

Doc = dict


def simulated(*args: str) -> Doc:
    """``simulate --json`` of BASE with ``args`` after it (a later option wins)."""
    result = CliRunner().invoke(app, [*BASE, *args])
    assert result.exit_code == 0, result.output
    doc: Doc = json.loads(result.stdout)
    return doc


def p50(doc: Doc, metric: str) -> float:
    return float(doc["points"][0][metric]["p50"])


def p99(doc: Doc, metric: str) -> float:
    return float(doc["points"][0][metric]["p99"])


@dataclass(frozen=True, slots=True)
class SimRow:
    """An option, two values, and what must hold between the two runs (``shows``, in words)."""

    option: str
    low: str
    high: str
    shows: str
    holds: Callable[[Doc, Doc], bool]


ROWS = (
    SimRow("--max-num-seqs", "1", "16", "one running sequence queues the rest: p99 TTFT rises",
           lambda one, many: p99(one, "ttft_ms") > 2 * p99(many, "ttft_ms")),
    SimRow("--prompt-dist", "fixed:200", "fixed:3000", "longer prompts: p50 TTFT rises",
           lambda short, long: p50(long, "ttft_ms") > 2 * p50(short, "ttft_ms")),
    SimRow("--output-dist", "fixed:10", "fixed:100", "longer outputs: p50 end-to-end rises",
           lambda short, long: p50(long, "e2e_ms") > 3 * p50(short, "e2e_ms")),
    SimRow("--rate", "2", "16", "the rate asked is the rate simulated",
           lambda low, high: (low["points"][0]["rate"], high["points"][0]["rate"]) == (2, 16)),
    SimRow("--requests", "10", "40", "every request asked is simulated",
           lambda few, many: (few["points"][0]["completed"], many["points"][0]["completed"])
           == (10, 40)),
    SimRow("--budgets", "256", "256,1024", "one point per budget asked",
           lambda one, two: [p["budget"] for p in one["points"]] == [256]
           and [p["budget"] for p in two["points"]] == [256, 1024]),
    SimRow("--gpu", "a100-80g", "h100-sxm", "the slower GPU decodes slower: p50 TBT rises",
           lambda a100, h100: p50(a100, "tbt_ms") > 1.2 * p50(h100, "tbt_ms")),
    SimRow("--tensor-parallel-size", "1", "2", "two GPUs pool bandwidth: p50 TBT falls",
           lambda one, two: p50(two, "tbt_ms") < 0.8 * p50(one, "tbt_ms")),
    SimRow("--calibration", "seed", "measured", "another step model: other figures",
           lambda seed, measured: p50(seed, "tbt_ms") != p50(measured, "tbt_ms")),
    SimRow("--seed", "1", "2", "other arrivals: other figures",
           lambda one, two: p99(one, "ttft_ms") != p99(two, "ttft_ms")),
)  # fmt: skip


def test_every_simulate_option_moves_the_figures_it_means() -> None:
    wrong = []
    for row in ROWS:
        low, high = simulated(row.option, row.low), simulated(row.option, row.high)
        if not row.holds(low, high):
            wrong.append(f"{row.option} {row.low} / {row.high}: not shown: {row.shows}")
    assert not wrong, "\n".join(wrong)
