"""One verified sweep budget as a typed value: what the sweep measured there, what the simulator
predicted, and the outcome as fields (:class:`Status`, :class:`StopReason`), never as prose.

The sweep builds a :class:`Point`, the verdict (:mod:`.select`), the console and the report read
it; JSON exists only at the file boundary (:mod:`budgettune.artifacts.points`).

Plain frozen dataclasses rather than pydantic models: the sweep imports them on every run and the
CLI's start stays light, the figures are few and flat, and the file boundary's reader gives the
one-line "file:line: field 'x': ..." errors the project prints everywhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.confidence import Confidence
from budgettune.core.units import finite_or_none, ms_or_none
from budgettune.loadgen.stop import StopReason

if TYPE_CHECKING:  # read field by field; numpy and the simulator load where they are computed
    from budgettune.core.metrics import MetricsSummary, Percentiles
    from budgettune.tune.predict import Prediction


class Status(StrEnum):
    """How a budget's verification ended. Only MEASURED says anything about the budget: an
    engine that failed to start, crashed or was aborted is kept and shown, and the search goes
    on without it."""

    MEASURED = "measured"
    ENGINE_FAILED = "engine_failed"  # the engine did not start
    CRASHED = "crashed"  # the engine exited during the replay
    ABORTED = "aborted"  # the replay stopped on --max-error-rate
    LOST = "lost"  # the worker or node running it was lost (Ray); re-queued once, --resume reruns

    @property
    def text(self) -> str:
        """The status in words: "engine failed"."""
        return self.value.replace("_", " ")


class Role(StrEnum):
    """Why a budget was verified: a candidate of the search, or the engine default beside it."""

    CANDIDATE = "candidate"
    REFERENCE = "reference"


@dataclass(frozen=True, slots=True)
class PercentilesMs:
    """One metric's percentiles in milliseconds as the documents hold them; None for no sample
    or +inf (failed requests)."""

    p50: float | None
    p90: float | None
    p99: float | None
    p999: float | None
    max: float | None

    @classmethod
    def of(cls, summary: Percentiles) -> PercentilesMs:
        # as MetricsSummary.to_json writes them: None for no sample or +inf
        return cls(
            ms_or_none(summary.p50),
            ms_or_none(summary.p90),
            ms_or_none(summary.p99),
            ms_or_none(summary.p999),
            ms_or_none(summary.max),
        )


@dataclass(frozen=True, slots=True)
class SummaryMs:
    """A run's summary as the documents hold it (:meth:`MetricsSummary.to_json`), typed."""

    ttft: PercentilesMs
    tbt: PercentilesMs
    tpot: PercentilesMs
    e2e: PercentilesMs
    throughput_tokens_per_s: float | None
    completed: int
    failed: int

    @classmethod
    def of(cls, summary: MetricsSummary) -> SummaryMs:
        return cls(
            ttft=PercentilesMs.of(summary.ttft_s),
            tbt=PercentilesMs.of(summary.tbt_s),
            tpot=PercentilesMs.of(summary.tpot_s),
            e2e=PercentilesMs.of(summary.e2e_s),
            throughput_tokens_per_s=finite_or_none(summary.throughput_tokens_per_s),
            completed=summary.completed,
            failed=summary.failed,
        )


@dataclass(frozen=True, slots=True)
class Predicted:
    """The simulator's figures at one budget: its summary, TBT and TTFT at the sweep's SLO
    percentile (ms, None when not finite), the mean decode batch, and its prefix cache's hit
    share (None: the engine keeps no prefix cache, or a document from before it)."""

    summary: SummaryMs
    tbt_at_slo_ms: float | None
    ttft_at_slo_ms: float | None
    decode_batch: float
    prefix_cache_hit_share: float | None = None

    @classmethod
    def of(cls, prediction: Prediction) -> Predicted:
        cache = prediction.prefix_cache
        return cls(
            summary=SummaryMs.of(prediction.summary),
            tbt_at_slo_ms=ms_or_none(prediction.tbt_s),
            ttft_at_slo_ms=ms_or_none(prediction.ttft_s),
            decode_batch=prediction.decode_batch,
            prefix_cache_hit_share=None if cache is None else cache.hit_share,
        )


@dataclass(frozen=True, slots=True)
class AtSlo:
    """TBT and TTFT (ms) at the SLO percentile: the figures a goodput probe was judged on."""

    tbt_ms: float | None
    ttft_ms: float | None


@dataclass(frozen=True, slots=True)
class GoodputProbe:
    """One rate the goodput search tried at a budget."""

    rate_per_s: float
    met: bool
    tbt_p99_ms: float | None
    ttft_p99_ms: float | None
    at_slo: AtSlo | None
    failed: int


@dataclass(frozen=True, slots=True)
class Goodput:
    """A budget's highest sustainable rate (``capped``: the search's ceiling, not a limit)."""

    rate_per_s: float
    capped: bool
    probes: tuple[GoodputProbe, ...]


Interval = tuple[float | None, float | None]  # [low, high] ms; None: an unbounded end


@dataclass(frozen=True, slots=True)
class Point:
    """One budget the sweep verified live.

    Every point has its budget, role, rate, prediction, status, verdict flags and wall time. An
    engine that failed to start has nothing else (``measured`` None). ``tbt_ms``/``ttft_ms`` are
    the verdict's figures at the SLO percentile (``ttft_ms`` None: failed requests);
    ``tbt_ok``/``ttft_ok`` are None unless the point was measured. ``stopped_by`` says why the
    replay ended before its schedule (EARLY_STOP: the verdict was certain, with the sentence in
    ``stop_message``; ERROR_RATE: aborted). ``engine`` and ``selfcheck`` are the replay's recorded
    facts, kept as the documents hold them.
    """

    budget: int
    role: Role
    rate_per_s: float
    predicted: Predicted | None
    status: Status
    tbt_ok: bool | None
    ttft_ok: bool | None
    ok: bool
    wall_s: float
    error: str | None = None
    log_tail: str | None = None
    measured: SummaryMs | None = None
    tbt_ms: float | None = None
    ttft_ms: float | None = None
    complete: bool = False
    stopped_by: StopReason | None = None
    stop_message: str | None = None
    engine: Mapping[str, Any] | None = None
    results_file: str | None = None
    selfcheck: Mapping[str, Any] | None = None
    goodput: Goodput | None = None
    tbt_ci_ms: Interval | None = None
    ttft_ci_ms: Interval | None = None
    confidence: Confidence | None = None  # None: not measured, or a document from before it
    replays: int = 1
    client_warnings: tuple[str, ...] = ()
    replay_files: tuple[str, ...] = ()  # results.json of every replay but results_file's
    slot: int | None = None  # the slot it ran on (sweep --parallel); None: the sweep's own process
    round: int | None = None  # the search round it was verified in (1, 2, ...)
    # The engine's own prefix-cache counters over the replays judged (None: it counts none)
    prefix_cache: PrefixCacheCount | None = None

    @property
    def is_measured(self) -> bool:
        return self.status is Status.MEASURED

    @property
    def stopped_early(self) -> bool:
        """The replay stopped once its verdict was certain: its last requests were cancelled on
        purpose (not failures), its throughput is partial."""
        return self.stopped_by is StopReason.EARLY_STOP

    @property
    def marginal(self) -> bool:
        """Measured, and its verdict lies inside its intervals."""
        return self.confidence is Confidence.MARGINAL

    @property
    def clear_pass(self) -> bool:
        """Measured, met both SLOs, and both intervals lie within them (a document from before
        intervals: its pass is taken as it was)."""
        return self.ok and self.confidence is not Confidence.MARGINAL


__all__ = [
    "AtSlo",
    "Confidence",
    "Goodput",
    "GoodputProbe",
    "Interval",
    "PercentilesMs",
    "Point",
    "Predicted",
    "Role",
    "Status",
    "StopReason",
    "SummaryMs",
]
