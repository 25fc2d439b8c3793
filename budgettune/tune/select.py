"""The sweep's verdict: the largest verified budget meeting both SLOs, with the reasons a user
needs (the cliff above it, the engine default, what binds when nothing is feasible), and the
files that carry it: recommendation.json, vllm.yaml or sglang.args."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from budgettune.core.units import format_ms
from budgettune.trace.schema import plural
from budgettune.tune.candidates import Candidates

if TYPE_CHECKING:  # points are read field by field
    from budgettune.tune.point import Point


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The chosen budget (None when no verified budget meets both SLOs) and why."""

    budget_tokens: int | None
    headline: str
    reasons: tuple[str, ...]
    binding_slo: str | None  # "tbt", "ttft" or "both" when nothing is feasible

    @property
    def text(self) -> str:
        return " ".join([self.headline, *self.reasons])


# The one duration format, with the words a point with failed requests (no p99) shows.
_shown = functools.partial(format_ms, missing="failed requests")


RATE_TOLERANCE = 0.02  # a realised rate within 2% of the asked one is that rate


def interval_text(interval: tuple[float | None, float | None]) -> str:
    """``[low, high]`` ms as "23.9-25.4 ms" (an open end: "> 23.9 ms")."""
    low, high = interval
    if high is None:
        return f"> {_shown(low)}"
    if low is None:
        return f"< {_shown(high)}"
    return f"{format_ms(low, unit=False)}-{_shown(high)}"


def marginal_text(point: Point, p: str, slo_tbt_s: float, slo_ttft_s: float) -> str:
    """Each figure whose 95% interval holds its SLO: "p99 TBT 24.6 ms (95% interval
    23.9-25.4 ms) against 25.0 ms"."""
    parts = []
    for name, value_ms, interval, slo_s in (
        ("TBT", point.tbt_ms, point.tbt_ci_ms, slo_tbt_s),
        ("TTFT", point.ttft_ms, point.ttft_ci_ms, slo_ttft_s),
    ):
        if interval is None:
            continue
        low, high = interval
        slo_ms = slo_s * 1e3
        if (low is None or low <= slo_ms) and (high is None or high > slo_ms):
            parts.append(
                f"{p} {name} {_shown(value_ms)} (95% interval {interval_text(interval)}) "
                f"against {format_ms(slo_s * 1e3)}"
            )
    return "; ".join(parts) or "its interval touches an SLO"


def _marginal_reason(
    best: Point, passing: Sequence[Point], p: str, slo_tbt_s: float, slo_ttft_s: float
) -> str:
    """The recommendation rests on a marginal pass: say so, and name the next budget down that
    passed clearly."""
    after = f" after {best.replays} replays" if best.replays > 1 else ""
    text = (
        f"The pass at {best.budget} is marginal{after}: "
        f"{marginal_text(best, p, slo_tbt_s, slo_ttft_s)}; another run may break it."
    )
    below = [pt for pt in passing if pt.budget < best.budget and pt.clear_pass]
    if below:
        safe = below[-1]
        return text + (
            f" {safe.budget} passed clearly ({p} TBT {_shown(safe.tbt_ms)}, {p} TTFT "
            f"{_shown(safe.ttft_ms)}): run it where the SLO must hold every time."
        )
    return text + " No smaller budget passed clearly."


def rate_text(
    rate_per_s: float, asked_rate_per_s: float | None = None, requests: int | None = None
) -> str:
    """The load in words: "7.2 req/s", or, when the schedule's realised rate differs from the
    asked one by more than 2% (a short Poisson schedule), both: "8 req/s (7.16 realised over
    240 requests)"."""
    if not math.isfinite(rate_per_s):  # one request, or all at one instant: no rate
        asked = "" if asked_rate_per_s is None else f"{asked_rate_per_s:.3g} req/s asked, "
        count = requests or 1
        what = "a single request" if count == 1 else f"all {plural(count, 'request')} at once"
        return asked + what
    if asked_rate_per_s is None or abs(rate_per_s / asked_rate_per_s - 1) <= RATE_TOLERANCE:
        return f"{rate_per_s:.3g} req/s"
    over = f" over {requests} requests" if requests else ""
    return f"{asked_rate_per_s:.3g} req/s ({rate_per_s:.3g} realised{over})"


def recommend(
    points: Sequence[Point],
    *,
    slo_tbt_s: float,
    slo_ttft_s: float,
    percentile: float,
    rate_per_s: float,
    default_budget: int | None,
    candidates: Candidates,
    baseline_label: str = "Your engine default",
    asked_rate_per_s: float | None = None,
    requests: int | None = None,
    concurrency: int | None = None,
    expected_hit_share: float | None = None,
) -> Recommendation:
    """Pick the largest measured budget that met both SLOs and explain the choice.

    ``rate_per_s`` is the schedule's realised rate; ``asked_rate_per_s`` (--rate), when it
    differs by more than 2%, is named beside it with the ``requests`` it was realised over.
    ``concurrency``: the replays ran a closed loop with that many in flight (no rate then)."""
    p = f"p{percentile:g}"
    load = (
        rate_text(rate_per_s, asked_rate_per_s, requests)
        if concurrency is None
        else f"{concurrency} in flight (closed loop)"
    )
    slo_tbt, slo_ttft = format_ms(slo_tbt_s * 1e3), format_ms(slo_ttft_s * 1e3)
    measured = sorted((pt for pt in points if pt.is_measured), key=lambda pt: pt.budget)
    passing = [pt for pt in measured if pt.ok]
    reasons: list[str] = []
    noise = _contradictions(measured, p) + cache_gaps(measured, expected_hit_share)
    for pt in points:
        if not pt.is_measured:
            reasons.append(f"Budget {pt.budget}: {pt.status.text} ({pt.error}).")
    if passing:
        # The feasible interval ends below the smallest budget that broke TBT. A larger budget
        # that passes anyway (usually the engine default) does so because few iterations fill
        # it: its p99 hides long gaps, so it is reported, not recommended.
        cliff = min((pt.budget for pt in measured if pt.tbt_ok is False), default=None)
        inside = [pt for pt in passing if cliff is None or pt.budget < cliff]
        best = inside[-1] if inside else passing[-1]
        headline = (
            f"Recommended: {best.budget}. {p} TBT {_shown(best.tbt_ms)} <= {slo_tbt}, "
            f"{p} TTFT {_shown(best.ttft_ms)} <= {slo_ttft} at {load}."
        )
        above = [pt for pt in measured if pt.budget > best.budget]
        if best.marginal:
            reasons.append(_marginal_reason(best, passing, p, slo_tbt_s, slo_ttft_s))
        if above:
            reasons.insert(0, f"{above[0].budget} {breaks_text(above[0], p)}.")
        elif best.budget == max(candidates.budgets, default=best.budget):
            reasons.insert(0, "It is the largest candidate; larger budgets were not tried.")
        if not inside:
            reasons.insert(
                0,
                f"{cliff} breaks {p} TBT, yet the larger {best.budget} meets it; no budget "
                f"measured below {cliff} meets both SLOs.",
            )
        fragile = [pt for pt in passing if pt.budget > best.budget]
        for pt in fragile:
            reasons.append(_fragile_pass(pt, best.budget, cliff, p, default_budget,
                                         baseline_label))  # fmt: skip
        if default_budget not in {pt.budget for pt in fragile}:
            reasons.extend(
                _default_reason(measured, default_budget, best.budget, slo_tbt_s, p, baseline_label)
            )
        return Recommendation(best.budget, headline, tuple(reasons + noise), None)
    if not measured:
        return Recommendation(
            None,
            "No recommendation: no budget could be measured.",
            tuple(reasons or ["Every engine start failed; see the log tails."]),
            None,
        )
    binding, advice = _binding_advice(measured, p, slo_tbt, slo_ttft, load, candidates)
    reasons.insert(0, advice)
    return Recommendation(None, "No budget meets both SLOs at this load.", tuple(reasons), binding)


CACHE_GAP = 0.10  # a measured hit share this far from the traffic's own is named


def cache_gaps(measured: Sequence[Point], expected_hit_share: float | None) -> list[str]:
    """One sentence for each measured budget whose engine found more than 10 points fewer (or
    more) prompt tokens cached than the traffic's shared prefixes allow."""
    if expected_hit_share is None:
        return []
    out = []
    for pt in measured:
        share = None if pt.prefix_cache is None else pt.prefix_cache.hit_share
        if share is None or abs(share - expected_hit_share) <= CACHE_GAP:
            continue
        predicted = None if pt.predicted is None else pt.predicted.prefix_cache_hit_share
        if (
            share < expected_hit_share
            and predicted is not None
            and expected_hit_share - predicted > CACHE_GAP
            and abs(share - predicted) < abs(share - expected_hit_share)
        ):  # the simulator, on the same arrivals, finds little too, nearer what was measured
            why = (
                f"the simulator finds {predicted:.1%} on the same arrivals, so the traffic allows "
                "no more here: requests sharing a prefix arrive before an earlier one has "
                "computed it (on SGLang, one scheduled in the same iteration hits nothing of "
                "it), or the cache cannot hold the prefixes"
            )
        elif share < expected_hit_share:
            why = (
                "its prefix cache is too small for the shared prefixes, or evicted them before "
                "they were reused"
            )
        else:
            why = (
                "other requests than this replay's share its prompts (another client of the "
                "server, or a cache the replay did not fill)"
            )
        out.append(
            f"Budget {pt.budget}: the engine found {share:.1%} of prompt tokens cached, the "
            f"traffic's shared prefixes allow {expected_hit_share:.1%}: {why}."
        )
    return out


def _binding_advice(
    measured: Sequence[Point],
    p: str,
    slo_tbt: str,
    slo_ttft: str,
    load: str,
    candidates: Candidates,
) -> tuple[str, str]:
    """When no budget meets both SLOs: which binds (tbt, ttft or both) and what would help."""
    tbt_fail = [pt for pt in measured if not pt.tbt_ok]
    ttft_fail = [pt for pt in measured if not pt.ttft_ok]
    if tbt_fail and not ttft_fail:
        binding = "tbt"
        smallest = measured[0]
        advice = (
            f"TBT binds: even {smallest.budget} gives {p} TBT {_shown(smallest.tbt_ms)} > "
            f"{slo_tbt}. A smaller budget pays a full weight read per chunk "
            f"({candidates.ridge_text}); lower the rate, loosen the TBT SLO, add GPUs "
            "(tensor parallel), or separate prefill from decode (disaggregation)."
        )
    elif ttft_fail and not tbt_fail:
        binding = "ttft"
        largest = measured[-1]
        advice = (
            f"TTFT binds: even {largest.budget} gives {p} TTFT {_shown(largest.ttft_ms)} > "
            f"{slo_ttft}. Prompts queue faster than they are prefilled: lower the rate, loosen "
            "the TTFT SLO, try larger budgets (--budgets), add GPUs, or disaggregate prefill."
        )
    else:
        binding = "both"
        advice = (
            f"Both bind: budgets small enough for {p} TBT <= {slo_tbt} miss {p} TTFT <= "
            f"{slo_ttft}, and larger ones break TBT. The load ({load}) is too "
            "high for these SLOs on this hardware: lower it, loosen an SLO, add GPUs, or "
            "disaggregate prefill and decode."
        )
    return binding, advice


def _fragile_pass(
    point: Point,
    chosen: int,
    cliff: int | None,
    p: str,
    default_budget: int | None,
    label: str,
) -> str:
    """Why a passing budget above the answer (above a budget that broke TBT) is not chosen."""
    budget = point.budget
    name = f"{label} ({budget})" if budget == default_budget else str(budget)
    worst = point.measured.tbt.max if point.measured is not None else None
    tail = f", max {_shown(worst)}" if worst is not None else ""
    return (
        f"{name} meets both SLOs too ({p} TBT {_shown(point.tbt_ms)}{tail}), but {cliff} below "
        f"it breaks {p} TBT: few iterations fill {budget} with this traffic, so its {p} passes "
        f"while its longest gaps do not; {chosen} is the safer choice."
    )


def _predicted_tbt_ms(point: Point) -> float | None:
    return None if point.predicted is None else point.predicted.tbt_at_slo_ms


def _contradictions(measured: Sequence[Point], p: str) -> list[str]:
    """A warning when measurements break the interval the search assumes (TTFT only falls and
    TBT only rises with the budget) and the simulator does not predict it: the engine or the
    machine was noisy during the run. A TBT order the simulator predicts too comes from the
    traffic and is explained by :func:`_fragile_pass` instead."""
    by_budget = {pt.budget: pt for pt in measured}
    notes = []
    for slo in ("TTFT", "TBT"):
        verdicts = [(pt.budget, pt.ttft_ok if slo == "TTFT" else pt.tbt_ok) for pt in measured]
        bad = [budget for budget, ok in verdicts if ok is False]
        good = [budget for budget, ok in verdicts if ok]
        if slo == "TTFT":
            clash = [(g, b) for b in bad for g in good if g < b]  # a smaller budget met TTFT
        else:
            clash = [(b, g) for b in bad for g in good if b < g]  # a larger budget met TBT
            clash = [
                (b, g)
                for b, g in clash
                if (low_ms := _predicted_tbt_ms(by_budget[b])) is None
                or (high_ms := _predicted_tbt_ms(by_budget[g])) is None
                or low_ms <= high_ms
            ]
        if clash:
            low, high = clash[0]
            notes.append(
                f"Note: {p} {slo} does not move monotonically here ({low} and {high} disagree "
                "with the budget order), which points to noise in the engine or on the machine "
                "during the run; re-run with more requests (--requests) before trusting the edge."
            )
    return notes


def breaks_text(point: Point, p: str) -> str:
    """Which SLOs ``point`` breaks, with its figures: "breaks p99 TBT (31.2 ms)"."""
    parts = []
    if not point.tbt_ok:
        parts.append(f"{p} TBT ({_shown(point.tbt_ms)})")
    if not point.ttft_ok:
        parts.append(f"{p} TTFT ({_shown(point.ttft_ms)})")
    return "breaks " + " and ".join(parts) if parts else "meets both"


def _default_reason(
    measured: Sequence[Point],
    default_budget: int | None,
    chosen: int,
    slo_tbt_s: float,
    p: str,
    label: str,
) -> list[str]:
    if default_budget is None or default_budget == chosen:
        return [] if default_budget is None else [f"{label} is that budget."]
    found = [pt for pt in measured if pt.budget == default_budget]
    if not found:
        return []
    point = found[0]
    if point.ok:
        return [f"{label} ({default_budget}) also meets both SLOs."]
    detail = breaks_text(point, p)
    if not point.tbt_ok and point.tbt_ms:
        detail += f", {point.tbt_ms / (slo_tbt_s * 1e3):.1f}x the TBT SLO"
    return [f"{label} ({default_budget}) {detail}."]
