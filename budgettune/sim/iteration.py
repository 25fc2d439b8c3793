"""Plain data the scheduler hands out per iteration: the plan it decided (with the aggregates the
step-time model takes) and what the committed iteration produced.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from budgettune.model.stepmodel import StepModel

RequestId = Hashable


@dataclass(slots=True, eq=False)
class IterationPlan:
    """The decisions for one iteration (returned by :meth:`Scheduler.schedule`).

    chunks: (request_id, tokens, offset) per prompt chunk, phase order; decodes: decode tokens,
    one per running decode; decode_context_tokens: the sum of their contexts (tokens each one
    attends to, itself included); preempted: request ids sent back to waiting this iteration.
    The prefill_* fields are the aggregates :meth:`StepModel.step_time_s` takes.
    """

    index: int
    chunks: list[tuple[RequestId, int, int]] = field(default_factory=list)
    decodes: int = 0
    decode_context_tokens: int = 0
    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_prefix_tokens: int = 0
    preempted: list[RequestId] = field(default_factory=list)

    def drop_decode(self, context_tokens: int) -> None:
        """Take back one decode of context ``context_tokens`` (its request was preempted)."""
        self.decodes -= 1
        self.decode_context_tokens -= context_tokens

    @property
    def empty(self) -> bool:
        return self.decodes == 0 and not self.chunks

    @property
    def tokens(self) -> int:
        """Tokens in the iteration (what counts against the budget)."""
        return self.prefill_tokens + self.decodes

    def step_time_s(self, model: StepModel) -> float:
        return model.step_time_s(
            self.prefill_tokens,
            self.prefill_pairs,
            self.prefill_prefix_tokens,
            self.decodes,
            self.decode_context_tokens,
            len(self.chunks),
        )


@dataclass(frozen=True, slots=True)
class IterationOutcome:
    """What one committed iteration produced (returned by :meth:`Scheduler.commit`).

    first_token_ids: requests whose prefill completed (they emitted their first token, or the
    first after a recompute); finished_ids: requests that emitted their last token;
    emitted_ids: every request that emitted a token, built only with ``commit(with_ids=True)``.
    """

    index: int
    tokens: int
    emitted_tokens: int
    first_token_ids: list[RequestId]
    finished_ids: list[RequestId]
    preempted_ids: list[RequestId]
    emitted_ids: list[RequestId] | None = None
