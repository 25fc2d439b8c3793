"""`roofline`: what-if questions to the step-time model (one iteration, or a chunked prompt)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budgettune.core.errors import SpecError
from budgettune.model.chunking import ChunkedPrefill, chunked_prefill
from budgettune.model.stepmodel import StepModel


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """A prompt chunk of ``tokens`` starting at ``offset`` (tokens already cached)."""

    tokens: int
    offset: int = 0


def parse_prefill_chunk(text: str) -> PrefillChunk:
    """Parse ``N`` or ``N@OFFSET`` as given to ``--prefill``."""
    tokens_text, _, offset_text = str(text).partition("@")
    try:
        tokens = int(tokens_text)
        offset = int(offset_text) if offset_text else 0
    except ValueError:
        raise SpecError(
            f"--prefill: cannot read {text!r}; write N or N@OFFSET, e.g. 512@1024"
        ) from None
    if tokens <= 0 or offset < 0:
        raise SpecError(f"--prefill: {text!r}: N must be positive and OFFSET zero or more")
    return PrefillChunk(tokens, offset)


def iteration_report(
    model: StepModel, chunks: list[PrefillChunk], decodes: int, context_tokens: int
) -> dict[str, Any]:
    """The JSON document for one iteration: its time and what makes it up."""
    prompt_chunks = [(c.tokens, c.offset) for c in chunks]
    contexts = [context_tokens] * decodes
    step_s = model.iteration_time_s(prompt_chunks, contexts)
    prefill_tokens = sum(c.tokens for c in chunks)
    return {
        "ridge_tokens": model.ridge_tokens,
        "step_ms": step_s * 1e3,
        "prefill_tokens": prefill_tokens,
        "decodes": decodes,
        "context_tokens": context_tokens,
        "tokens": prefill_tokens + decodes,
        "compute_bound": model.compute_bound(prompt_chunks, contexts),
        "mode": model.mode,
    }


def chunking_report(
    model: StepModel,
    prompt_tokens: int,
    chunk_sizes: list[int],
    decodes: int,
    context_tokens: int,
) -> dict[str, Any]:
    """The JSON document for prefilling one prompt at several chunk sizes."""
    results: list[ChunkedPrefill] = [
        chunked_prefill(model, prompt_tokens, size, decodes=decodes, context_tokens=context_tokens)
        for size in chunk_sizes
    ]
    one_shot_s = model.iteration_time_s([(prompt_tokens, 0)], [context_tokens] * decodes)
    return {
        "ridge_tokens": model.ridge_tokens,
        "prompt_tokens": prompt_tokens,
        "decodes": decodes,
        "context_tokens": context_tokens,
        "mode": model.mode,
        "one_shot_ms": one_shot_s * 1e3,
        "chunking": [
            {
                "chunk_tokens": r.chunk_tokens,
                "total_ms": r.total_s * 1e3,
                "overhead_pct": r.overhead_pct,
                "below_ridge": r.chunk_tokens < model.ridge_tokens,
                "step_ms": [s * 1e3 for s in r.step_s],
            }
            for r in results
        ],
    }
