"""Per-request records: the raw data every run produces, measured or simulated.

Records keep raw timestamps (seconds on one monotonic clock, run start = 0) and derive nothing;
:mod:`budgettune.core.metrics` turns them into TTFT, TBT, TPOT and E2E.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request.

    target_s: when the schedule meant to send it; sent_s: when it was actually sent (equal in a
    simulation). token_times_s: arrival time of every output token, in order (one entry per
    token; a stream chunk carrying k tokens contributes k entries, spread by the load generator).
    error: None for success, else a short reason ("http 400", "timeout", "short output 3/8").
    """

    request_id: int
    prompt_tokens: int
    output_tokens: int  # requested
    target_s: float
    sent_s: float
    token_times_s: FloatArray = field(default_factory=lambda: np.empty(0))
    error: str | None = None
    merged_chunks: int = 0  # stream chunks that carried more than one token
    preemptions: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.token_times_s) == self.output_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "target_s": self.target_s,
            "sent_s": self.sent_s,
            "token_times_s": [round(float(t), 7) for t in self.token_times_s],
            "error": self.error,
            "merged_chunks": self.merged_chunks,
            "preemptions": self.preemptions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestRecord:
        return cls(
            request_id=int(data["request_id"]),
            prompt_tokens=int(data["prompt_tokens"]),
            output_tokens=int(data["output_tokens"]),
            target_s=float(data["target_s"]),
            sent_s=float(data["sent_s"]),
            token_times_s=np.asarray(data.get("token_times_s", []), dtype=np.float64),
            error=data.get("error"),
            merged_chunks=int(data.get("merged_chunks", 0)),
            preemptions=int(data.get("preemptions", 0)),
        )
