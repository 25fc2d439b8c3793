"""`roofline`: what-if questions to the step-time model (one iteration, or a chunked prompt)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from budgettune.app.requests import RooflineRequest
from budgettune.core.errors import SpecError
from budgettune.core.units import parse_int_list
from budgettune.model.chunking import ChunkedPrefill, chunked_prefill
from budgettune.model.stepmodel import StepModel


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """A prompt chunk of ``tokens`` starting at ``offset`` (tokens already cached)."""

    tokens: int
    offset: int = 0


def parse_prefill_chunk(text: str) -> PrefillChunk:
    """Parse ``N`` or ``N@OFFSET`` (a prefill chunk of N tokens after OFFSET already in the
    KV cache). Raises SpecError on field ``prefill``."""
    tokens_text, _, offset_text = str(text).partition("@")
    try:
        tokens = int(tokens_text)
        offset = int(offset_text) if offset_text else 0
    except ValueError:
        raise SpecError(
            f"cannot read {text!r}; write N or N@OFFSET, e.g. 512@1024", field="prefill"
        ) from None
    if tokens <= 0 or offset < 0:
        raise SpecError(f"{text!r}: N must be positive and OFFSET zero or more", field="prefill")
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


@dataclass(frozen=True, slots=True)
class RooflineAnswer:
    """The answer to a roofline request: ``chunking`` (a prompt at several chunk sizes) or
    not (one iteration), and its JSON document; ``asked_iteration``: the request named an
    iteration's contents (else the document is about the ridge alone)."""

    chunking: bool
    asked_iteration: bool
    doc: dict[str, Any]


def answer(request: RooflineRequest) -> RooflineAnswer:
    """Validate ``request`` and ask the step-time model. Raises SpecError naming the field."""
    from budgettune.app.step_model import step_model_of

    if request.decodes < 0:
        raise SpecError(f"must be zero or more, got {request.decodes}", field="decodes")
    if request.context < 0:
        raise SpecError(f"must be zero or more, got {request.context}", field="context")
    if request.prompt is not None and request.prefill:
        raise SpecError(
            "asks a different question than --prefill; give one of them", field="prompt"
        )
    if request.prompt is not None and request.prompt <= 0:
        raise SpecError(
            f"must be a positive number of tokens, got {request.prompt}", field="prompt"
        )
    step_model = step_model_of(request.model)
    if request.prompt is not None:
        sizes = parse_int_list(request.chunk_sizes, field="chunk_sizes")
        doc = chunking_report(step_model, request.prompt, sizes, request.decodes, request.context)
        return RooflineAnswer(chunking=True, asked_iteration=True, doc=doc)
    chunks = [parse_prefill_chunk(text) for text in request.prefill]
    doc = iteration_report(step_model, chunks, request.decodes, request.context)
    return RooflineAnswer(chunking=False, asked_iteration=bool(chunks or request.decodes), doc=doc)
