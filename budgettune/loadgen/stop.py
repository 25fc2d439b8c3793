"""Why a replay stopped before its schedule ended, as a field (:class:`StopReason`) beside the
sentence the user reads. Light on purpose: the sweep's typed points import it without the load
generator's HTTP client."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class StopReason(StrEnum):
    """Why a replay stopped before its schedule ended."""

    EARLY_STOP = "early_stop"  # a caller's rule: the verdict is already certain
    ERROR_RATE = "error_rate"  # --max-error-rate exceeded
    INTERRUPTED = "interrupted"  # Ctrl-C


@dataclass(slots=True, frozen=True)
class Stop:
    """A stop rule's decision: the reason as a field, and the sentence shown to the user."""

    reason: StopReason
    message: str
