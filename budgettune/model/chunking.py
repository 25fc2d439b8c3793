"""What-if arithmetic on the step-time model: the cost of prefilling one prompt in chunks.

Used by `budgettune roofline` and by candidate selection: it shows the price of chunks below
the ridge (every chunk re-reads all weights) and of re-reading the cached prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.errors import SpecError
from budgettune.model.stepmodel import StepModel

# Iterations one chunked prefill is timed over: the cost is one step per iteration, so a
# 10^20-token prompt in 128-token chunks is refused instead of computed for hours.
MAX_ITERATIONS = 100_000


@dataclass(frozen=True, slots=True)
class ChunkedPrefill:
    """Prefilling one prompt in chunks of ``chunk_tokens``: each iteration's time and the total."""

    chunk_tokens: int
    step_s: tuple[float, ...]
    total_s: float
    overhead_pct: float  # against prefilling the whole prompt in one iteration


def chunked_prefill(
    model: StepModel,
    prompt_tokens: int,
    chunk_tokens: int,
    *,
    decodes: int = 0,
    context_tokens: int = 0,
) -> ChunkedPrefill:
    """Iteration times to prefill ``prompt_tokens`` in chunks of ``chunk_tokens`` prompt tokens.

    ``decodes`` requests decode beside every iteration, at context ``context_tokens`` in the first
    and one more token each following iteration (they keep generating). The comparison point is
    one iteration holding the whole prompt with the same decodes beside it.
    """
    if prompt_tokens <= 0 or chunk_tokens <= 0:
        raise ValueError("prompt_tokens and chunk_tokens must be positive")
    iterations = -(-prompt_tokens // chunk_tokens)
    if iterations > MAX_ITERATIONS:
        raise SpecError(
            f"{prompt_tokens:,} tokens in chunks of {chunk_tokens:,} are {iterations:,} "
            f"iterations; roofline times at most {MAX_ITERATIONS:,} (a larger chunk, or a "
            "shorter --prompt)",
            field="chunk_sizes",
        )
    steps: list[float] = []
    for k in range(iterations):  # one step from its aggregates: no list per decode
        offset = k * chunk_tokens
        n = min(chunk_tokens, prompt_tokens - offset)
        pairs = n * offset + n * n / 2.0
        steps.append(model.step_time_s(n, pairs, offset, decodes, decodes * (context_tokens + k)))
    prompt = float(prompt_tokens)
    one_shot_s = model.step_time_s(prompt, prompt * prompt / 2.0, 0, decodes,
                                   decodes * context_tokens)  # fmt: skip
    total_s = sum(steps)
    return ChunkedPrefill(
        chunk_tokens=chunk_tokens,
        step_s=tuple(steps),
        total_s=total_s,
        overhead_pct=(total_s / one_shot_s - 1.0) * 100.0,
    )
