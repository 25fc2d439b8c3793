"""The load generator's account of its own accuracy over one run (the replay's ``selfcheck``):
a type read by attribute by the CLI and the sweep, written to JSON only by
:meth:`SelfCheck.to_json`. No numpy here: :meth:`RunOutcome.selfcheck` computes it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class LagStats:
    """p50, p99 and max of a lateness in milliseconds; all None when nothing was measured."""

    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None

    def to_json(self) -> dict[str, float | None]:
        return {"p50": self.p50_ms, "p99": self.p99_ms, "max": self.max_ms}


@dataclass(slots=True, frozen=True)
class SelfCheck:
    """Achieved vs target rate; send lag (request on the socket - its target time) and, within
    it, the timer's own lateness (the machine's share); stream chunks that carried several
    tokens (``merged_chunks_warning``: more than the share the TBT figures tolerate)."""

    scheduled: int
    sent: int
    target_rate_per_s: float | None
    achieved_rate_per_s: float | None
    send_lag: LagStats
    timer_lateness: LagStats
    chunks: int
    merged_chunks: int
    merged_chunk_share: float
    merged_chunks_mode: str
    merged_chunks_warning: bool
    complete: bool
    stop_reason: str | None
    duration_s: float

    def to_json(self) -> dict[str, object]:
        """The ``selfcheck`` record of results.json and points.jsonl (key names as written since
        the first release)."""
        return {
            "scheduled": self.scheduled,
            "sent": self.sent,
            "target_rate_per_s": self.target_rate_per_s,
            "achieved_rate_per_s": self.achieved_rate_per_s,
            "send_lag_ms": self.send_lag.to_json(),
            "timer_lateness_ms": self.timer_lateness.to_json(),
            "chunks": self.chunks,
            "merged_chunks": self.merged_chunks,
            "merged_chunk_share": self.merged_chunk_share,
            "merged_chunks_mode": self.merged_chunks_mode,
            "merged_chunks_warning": self.merged_chunks_warning,
            "complete": self.complete,
            "stop_reason": self.stop_reason,
            "duration_s": self.duration_s,
        }
