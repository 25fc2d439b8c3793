"""Shape figures of a saved profile (the JSON `budgettune profile` writes) and the cross-check of
two profiles of the same model: the knee verdict, prefill growth with tokens, decode growth with
batch and context, and a mixed iteration against its two parts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

# The smallest prefill size the growth figures use: below it the vLLM path's times are mostly
# fixed request overhead (HTTP, tokenising, scheduling), which says nothing about the model.
PREFILL_FROM_TOKENS = 256
# Decode contexts within this ratio of each other are one context (vLLM reports the context a
# probe reached, 290 or 291, where torch reports the planned 256).
SAME_CONTEXT_RATIO = 1.3


@dataclass(slots=True, frozen=True)
class ShapeFigures:
    """One profile's shape. Growth figures are over the measured range, from power laws fitted
    in log-log (robust to one noisy probe): prefill t ~ P^e over P >= PREFILL_FROM_TOKENS;
    decode t ~ b^e with one intercept per context; decode t ~ L^e with one intercept per batch.
    mixed_over_parts: median over the mixed probes of t(mixed) / (t(prefill P) + t(decode b)),
    the decode taken at the context nearest the mixed probe's."""

    engine: str
    knee_found: bool
    knee_reason: str
    knee_tokens: float | None
    prefill_tokens: tuple[int, int]
    prefill_exponent: float
    prefill_growth: float
    batch_range: tuple[int, int]
    batch_exponent: float
    batch_growth: float
    context_range: tuple[int, int]
    context_exponent: float
    context_growth: float
    mixed_over_parts: float
    prefill_ms: dict[int, float]
    decode_ms: dict[tuple[int, int], float]  # (context group's smallest context, batch)
    mixed_ms: dict[tuple[int, int], float]  # (prompt, batch)

    def table(self) -> str:
        """The curves and figures, for a failure message."""
        prefill = " ".join(f"{p}:{t:.1f}" for p, t in sorted(self.prefill_ms.items()))
        contexts = sorted({c for c, _ in self.decode_ms})
        batches = sorted({b for _, b in self.decode_ms})
        decode = "; ".join(
            f"L~{c}: " + " ".join(f"b{b}:{self.decode_ms[(c, b)]:.2f}" for b in batches
                                  if (c, b) in self.decode_ms)
            for c in contexts
        )  # fmt: skip
        mixed = " ".join(f"P{p}b{b}:{t:.1f}" for (p, b), t in sorted(self.mixed_ms.items()))
        return (
            f"{self.engine}: knee {self.knee_found} ({self.knee_reason})\n"
            f"  prefill ms {prefill}\n"
            f"    t ~ P^{self.prefill_exponent:.2f}: x{self.prefill_growth:.2f} over "
            f"{self.prefill_tokens[0]}..{self.prefill_tokens[1]} tokens\n"
            f"  decode ms {decode}\n"
            f"    t ~ b^{self.batch_exponent:.2f}: x{self.batch_growth:.2f} over batch "
            f"{self.batch_range[0]}..{self.batch_range[1]}; t ~ L^{self.context_exponent:.2f}: "
            f"x{self.context_growth:.2f} over context "
            f"{self.context_range[0]}..{self.context_range[1]}\n"
            f"  mixed ms {mixed}\n"
            f"    mixed / (prefill + decode): median {self.mixed_over_parts:.2f}"
        )


def _medians(doc: dict[str, Any], series: str) -> list[tuple[int, int, int, float]]:
    """(prompt, batch, context, median ms) of one series' probes, tile probes left out."""
    return [
        (p["prompt_tokens"], p["batch"], p["context_tokens"], float(np.median(p["times_s"])) * 1e3)
        for p in doc["probes"]
        if p["series"] == series and p.get("tag") != "tile" and p["times_s"]
    ]


def _group_contexts(contexts: list[int]) -> dict[int, int]:
    """Each context -> the smallest context of its group (neighbours within SAME_CONTEXT_RATIO)."""
    out: dict[int, int] = {}
    head = None
    for c in sorted(set(contexts)):
        if head is None or c > head * SAME_CONTEXT_RATIO:
            head = c
        out[c] = head
    return out


def _pooled_exponent(groups: dict[int, list[tuple[float, float]]]) -> float:
    """Least-squares slope of log t on log x with one intercept per group (groups of one point
    or one x carry no slope and are left out)."""
    xs: list[float] = []
    ys: list[float] = []
    for points in groups.values():
        if len({x for x, _ in points}) < 2:
            continue
        lx = np.log([x for x, _ in points])
        ly = np.log([t for _, t in points])
        xs.extend(lx - lx.mean())
        ys.extend(ly - ly.mean())
    x, y = np.asarray(xs), np.asarray(ys)
    return float(x @ y / (x @ x)) if len(x) and x @ x > 0 else math.nan


def slope_rise(prefill_ms: dict[int, float], split_tokens: float) -> float:
    """How many times steeper prefill time grows above ``split_tokens`` than below it: the
    slopes of two least-squares lines over the sizes from PREFILL_FROM_TOKENS to the split and
    beyond it. A line gives about 1; a knee more. A side with fewer than 3 such sizes takes the
    3 nearest the split (CI: vLLM's knee at 353 tokens, where torch's grid has only 256 and 320
    between 256 and the knee, read NaN and failed as a mismatch); NaN if a side has fewer than 3
    sizes at all."""
    below = sorted(p for p in prefill_ms if PREFILL_FROM_TOKENS <= p <= split_tokens)
    above = sorted(p for p in prefill_ms if p > split_tokens)
    if len(below) < 3:
        below = sorted(p for p in prefill_ms if p <= split_tokens)[-3:]
    if len(below) < 3 or len(above) < 3:
        return math.nan
    low, high = (
        float(np.polyfit(side, [prefill_ms[p] for p in side], 1)[0]) for side in (below, above)
    )
    return high / low if low > 0 else math.inf


def shape_figures(doc: dict[str, Any]) -> ShapeFigures:
    """The shape figures of a profile JSON document (as saved by `budgettune profile -o`)."""
    prefill = {p: t for p, _, _, t in _medians(doc, "prefill")}
    sizes = sorted(p for p in prefill if p >= PREFILL_FROM_TOKENS)
    assert len(sizes) >= 3, f"{doc['engine']['name']}: prefill sizes {sorted(prefill)}"
    lp = np.log(sizes)
    prefill_exp = float(np.polyfit(lp, np.log([prefill[p] for p in sizes]), 1)[0])

    decode_raw = _medians(doc, "decode")
    group = _group_contexts([c for _, _, c, _ in decode_raw])
    decode = {(group[c], b): t for _, b, c, t in decode_raw}
    by_context: dict[int, list[tuple[float, float]]] = {}
    by_batch: dict[int, list[tuple[float, float]]] = {}
    for _, b, c, t in decode_raw:
        by_context.setdefault(group[c], []).append((b, t))
        by_batch.setdefault(b, []).append((c, t))
    batches = sorted(by_batch)
    contexts = sorted(c for _, _, c, _ in decode_raw)
    batch_exp = _pooled_exponent(by_context)
    context_exp = _pooled_exponent(by_batch)

    mixed_raw = _medians(doc, "mixed")
    ratios = []
    for p, b, c, t in mixed_raw:
        near = min(
            (key for key in decode if key[1] == b), key=lambda k: abs(math.log(k[0] / c)),
            default=None,
        )  # fmt: skip
        if p in prefill and near is not None:
            ratios.append(t / (prefill[p] + decode[near]))
    assert ratios, f"{doc['engine']['name']}: no mixed probe with both parts measured"

    ridge = doc.get("ridge") or {}
    return ShapeFigures(
        engine=str(doc["engine"]["name"]),
        knee_found=bool(ridge.get("knee_found")),
        knee_reason=str(ridge.get("reason", "no ridge fit")),
        knee_tokens=float(ridge["knee_tokens"]) if ridge.get("knee_found") else None,
        prefill_tokens=(sizes[0], sizes[-1]),
        prefill_exponent=prefill_exp,
        prefill_growth=(sizes[-1] / sizes[0]) ** prefill_exp,
        batch_range=(batches[0], batches[-1]),
        batch_exponent=batch_exp,
        batch_growth=(batches[-1] / batches[0]) ** batch_exp,
        context_range=(contexts[0], contexts[-1]),
        context_exponent=context_exp,
        context_growth=(contexts[-1] / contexts[0]) ** context_exp,
        mixed_over_parts=float(np.median(ratios)),
        prefill_ms=prefill,
        decode_ms=decode,
        mixed_ms={(p, b): t for p, b, _, t in mixed_raw},
    )
