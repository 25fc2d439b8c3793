"""What the HTML report draws: small, explicit input dataclasses, independent of any file schema.

Adapters in :mod:`budgettune.report.sources` fill these from result files; the chart builders in
:mod:`budgettune.report.charts` and the page in :mod:`budgettune.report.html` read only these.
Latencies are in milliseconds, token counts in tokens, times in seconds from run start.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_PERCENTILE_KEY_RE = re.compile(r"^p(\d+)$")


def percentile_from_key(key: str) -> float | None:
    """``"p50"`` -> 50, ``"p99"`` -> 99, ``"p999"`` -> 99.9, ``"max"`` -> 100; else None."""
    if key == "max":
        return 100.0
    match = _PERCENTILE_KEY_RE.match(key)
    if not match:
        return None
    digits = match.group(1)
    return float(digits) if len(digits) <= 2 else float(f"{digits[:2]}.{digits[2:]}")


@dataclass(slots=True, frozen=True)
class Percentiles:
    """One latency distribution summarised as percentile -> milliseconds (100 = max)."""

    values_ms: dict[float, float]

    def at(self, percentile: float) -> float | None:
        """The value at ``percentile`` (e.g. 99 or 99.9), None when not summarised."""
        value = self.values_ms.get(float(percentile))
        return None if value is None else float(value)

    @classmethod
    def from_keys(cls, data: dict[str, object]) -> Percentiles:
        """From ``{"p50": .., "p99": .., "p999": .., "max": ..}``; unknown keys are ignored,
        ``None`` (no sample) and non-numbers are skipped, ``inf`` (failed requests) kept."""
        values: dict[float, float] = {}
        for key, raw in data.items():
            pct = percentile_from_key(key)
            if pct is None or isinstance(raw, bool) or not isinstance(raw, int | float):
                continue
            if not math.isnan(float(raw)):
                values[pct] = float(raw)
        return cls(values)


@dataclass(slots=True, frozen=True)
class Cdf:
    """An empirical CDF, already downsampled: ``values_ms`` ascending, ``fraction`` in (0, 1]."""

    values_ms: FloatArray
    fraction: FloatArray


@dataclass(slots=True, frozen=True)
class BudgetPoint:
    """One budget's evidence: what was measured on an engine and/or predicted by the simulator.

    budget_tokens None means chunking off (whole prompts, the ``none`` policy). ``passed`` is the
    verdict on the SLOs (None when not judged); ``error`` is set when the engine crashed or did
    not start at this budget (then measured may be None).
    """

    budget_tokens: int | None
    measured_tbt: Percentiles | None = None
    measured_ttft: Percentiles | None = None
    predicted_tbt: Percentiles | None = None
    predicted_ttft: Percentiles | None = None
    throughput_tokens_per_s: float | None = None
    predicted_throughput_tokens_per_s: float | None = None
    goodput_per_s: float | None = None
    completed: int | None = None
    failed: int | None = None
    failure_reasons: dict[str, int] = field(default_factory=dict)
    passed: bool | None = None
    note: str | None = None  # e.g. "stopped early: verdict certain after 212 requests"
    error: str | None = None
    tbt_cdf: Cdf | None = None
    ttft_cdf: Cdf | None = None
    # The measured percentile's 95% interval, ms (None: an unbounded end), its verdict's
    # confidence ("clear" or "marginal") and the replays it pools; None before intervals.
    tbt_interval_ms: tuple[float | None, float | None] | None = None
    ttft_interval_ms: tuple[float | None, float | None] | None = None
    confidence: str | None = None
    replays: int = 1
    round: int | None = None  # the search round it ran in (--parallel: budgets run together)
    slot: int | None = None
    # The prefix cache's share of prompt tokens found cached: the engine's counters, and the
    # simulator's (None: no prefix cache, or nothing looked up)
    cache_hit_share: float | None = None
    predicted_cache_hit_share: float | None = None

    @property
    def label(self) -> str:
        return "none (no chunking)" if self.budget_tokens is None else str(self.budget_tokens)


@dataclass(slots=True, frozen=True)
class SweepInput:
    """Budgets against the SLOs. ``percentile`` is the one the SLOs constrain (99 by default)."""

    points: tuple[BudgetPoint, ...]
    slo_tbt_ms: float | None = None
    slo_ttft_ms: float | None = None
    percentile: float = 99.0
    rate_per_s: float | None = None
    recommended_budget: int | None = None
    engine_default_budget: int | None = None
    feasible_tokens: tuple[int, int] | None = None  # None: derive from the points' verdicts

    def numeric_points(self) -> list[BudgetPoint]:
        """Points with a budget, sorted by budget (the ``none`` policy left out)."""
        return sorted(
            (p for p in self.points if p.budget_tokens is not None),
            key=lambda p: p.budget_tokens or 0,
        )

    def feasible_interval(self) -> tuple[int, int] | None:
        """The budgets that passed, as [lowest, highest]; None when none passed."""
        if self.feasible_tokens is not None:
            return self.feasible_tokens
        passed = [p.budget_tokens for p in self.numeric_points() if p.passed]
        ints = [b for b in passed if b is not None]
        return (min(ints), max(ints)) if ints else None


@dataclass(slots=True, frozen=True)
class PairCellInput:
    """One (budget, max-num-seqs) pair: its percentile TBT and TTFT, measured when it was
    launched (``measured``), else predicted by the simulator; ``passed``: the verdict on both
    SLOs, from its own replay when measured, else implied by a measured neighbour (None:
    neither)."""

    budget_tokens: int
    max_num_seqs: int
    tbt_ms: float | None
    ttft_ms: float | None
    measured: bool
    passed: bool | None


@dataclass(slots=True, frozen=True)
class PairGridInput:
    """The budget tuned with max-num-seqs: every pair, the chosen one and the launches made."""

    budgets: tuple[int, ...]
    seqs_values: tuple[int, ...]
    cells: tuple[PairCellInput, ...]
    chosen: tuple[int, int] | None
    launches: int
    slo_tbt_ms: float | None = None
    slo_ttft_ms: float | None = None
    percentile: float = 99.0


@dataclass(slots=True, frozen=True)
class ProfileCurve:
    """Prefill-only iteration time against tokens from one source (an engine, torch, the model).

    lo_ms / hi_ms: the spread over repeats (e.g. min and max), None without repeats.
    fit_tokens / fit_ms: the fitted two-segment curve, sampled for drawing.
    """

    label: str
    tokens: FloatArray
    median_ms: FloatArray
    lo_ms: FloatArray | None = None
    hi_ms: FloatArray | None = None
    fit_tokens: FloatArray | None = None
    fit_ms: FloatArray | None = None
    measured: bool = True  # False: model output (analytic), drawn as such


@dataclass(slots=True, frozen=True)
class TileProbe:
    """A round size against one token more (256 vs 257): tile quantisation shows as a jump."""

    round_tokens: int
    round_ms: float
    plus_one_ms: float


@dataclass(slots=True, frozen=True)
class ProfileInput:
    """The profile: curves, the ridge P* with its confidence band, the budget floor and ceilings.

    ceilings_tokens: TBT target (ms) -> the budget whose iteration reaches it.
    """

    curves: tuple[ProfileCurve, ...]
    ridge_tokens: float | None = None
    ridge_ci_tokens: tuple[float, float] | None = None
    knee_note: str | None = None  # e.g. "no knee inside 64-8192 tokens: linear fit shown"
    floor_tokens: int | None = None
    ceilings_tokens: dict[float, int] = field(default_factory=dict)
    ceilings_note: str | None = None  # e.g. "with 64 decodes at context 1024 beside the chunk"
    tile_probes: tuple[TileProbe, ...] = ()
    fit_errors: dict[str, str] = field(default_factory=dict)  # series -> "median 2.1%, max 6%"


@dataclass(slots=True, frozen=True)
class WorkloadInput:
    """The requests as scheduled: lengths in tokens, intended send times in seconds."""

    prompt_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    arrival_s: FloatArray | None = None


@dataclass(slots=True, frozen=True)
class TimelineRequest:
    """One request of a replay: send time and every output token's arrival, seconds."""

    request_id: int
    sent_s: float
    token_times_s: FloatArray
    failed: bool = False


@dataclass(slots=True, frozen=True)
class TimelineInput:
    """Token emission of one run (e.g. the recommended budget's replay)."""

    title: str
    requests: tuple[TimelineRequest, ...]
    slo_tbt_ms: float | None = None


@dataclass(slots=True, frozen=True)
class Check:
    """One SLO verdict line: ``p99 TBT 31 ms <= 50 ms``."""

    name: str
    value_ms: float | None
    limit_ms: float
    passed: bool


@dataclass(slots=True, frozen=True)
class Verdict:
    """The panel at the top of the page."""

    headline: str
    details: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    facts: tuple[tuple[str, str], ...] = ()  # (label, value): load, SLOs, engine default...
    ok: bool | None = None  # colours the panel: True pass, False fail, None neutral


@dataclass(slots=True, frozen=True)
class Provenance:
    """How to reproduce: the command, versions, hardware, the trace and its checksum, raw files.

    files: (label, path relative to the report) pairs, rendered as links.
    """

    command: str | None = None
    versions: tuple[tuple[str, str], ...] = ()
    hardware: tuple[tuple[str, str], ...] = ()
    trace: str | None = None
    trace_sha256: str | None = None
    created: str | None = None
    files: tuple[tuple[str, str], ...] = ()


@dataclass(slots=True, frozen=True)
class EngineConfigInput:
    """The user's own engine config (``--engine-config``) as the launches read it, and the
    written answer (``written_name``: vllm.yaml or sglang.yaml) as a unified diff against it."""

    text: str
    written_name: str | None = None
    diff: tuple[str, ...] = ()  # unified diff lines; empty: not written (no budget met the SLOs)


@dataclass(slots=True, frozen=True)
class ReportInput:
    """Everything one page shows; any section may be missing and is then left out."""

    title: str
    kind: str  # "sweep", "replay", "simulate", "profile"
    verdict: Verdict | None = None
    profile: ProfileInput | None = None
    sweep: SweepInput | None = None
    pairs: PairGridInput | None = None  # the budget tuned with max-num-seqs
    workload: WorkloadInput | None = None
    timeline: TimelineInput | None = None
    provenance: Provenance = field(default_factory=Provenance)
    notes: tuple[str, ...] = ()  # warnings worth a reader's attention (merged chunks, lag...)
    engine_config: EngineConfigInput | None = None


def cdf_from_samples(samples_ms: npt.ArrayLike, *, max_points: int = 400) -> Cdf | None:
    """Downsample an empirical CDF to at most ``max_points`` points, denser in the tail.

    Points are taken at fractions spaced evenly in log(1 - F), so p99 and p99.9 keep their
    resolution; the minimum and the maximum are always kept. ``inf`` (failed requests) stays
    off the chart but still counts in the fractions. None for no finite sample.
    """
    values = np.sort(np.asarray(samples_ms, dtype=np.float64).ravel())
    n = len(values)
    finite = int(np.count_nonzero(np.isfinite(values)))
    if finite == 0:
        return None
    if finite <= max_points:
        index = np.arange(finite)
    else:
        tail = np.geomspace(1.0, float(n), max_points - 1)  # 1 - F from 1/n .. 1 in log steps
        index = np.unique(np.clip(np.round(n - tail).astype(np.int64), 0, finite - 1))
        index = np.unique(np.concatenate([[0], index, [finite - 1]]))
    return Cdf(values[index], (index + 1) / n)
