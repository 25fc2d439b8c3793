"""`roofline`: what-if questions to the step-time model (one iteration, or a chunked prompt)."""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.app.requests import RooflineRequest
from budgettune.core.errors import SpecError, shorten
from budgettune.core.limits import MAX_SEQS, MAX_TOKENS, check_count, check_tokens
from budgettune.core.units import MAX_LIST_ITEMS, parse_int_list
from budgettune.model.allreduce import AllReduce, allreduces
from budgettune.model.calibration import Calibration
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
    if tokens > MAX_TOKENS or offset > MAX_TOKENS:
        raise SpecError(
            f"{shorten(repr(text))}: N and OFFSET are at most {MAX_TOKENS:,} tokens",
            field="prefill",
        )
    return PrefillChunk(tokens, offset)


@dataclass(frozen=True, slots=True)
class IterationTime:
    """One iteration's modelled time and what makes it up (``roofline --prefill/--decodes``)."""

    ridge_tokens: float
    step_s: float
    prefill_tokens: int
    decodes: int
    context_tokens: int
    compute_bound: bool
    mode: str
    comm_s: float = 0.0  # the all-reduces' part of step_s (tensor parallelism)

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decodes

    @property
    def comm_share(self) -> float:
        """The all-reduces' share of the iteration's time (0 on one GPU)."""
        return self.comm_s / self.step_s if self.step_s > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "ridge_tokens": self.ridge_tokens,
            "step_ms": self.step_s * 1e3,
            "comm_ms": self.comm_s * 1e3,
            "comm_share": self.comm_share,
            "prefill_tokens": self.prefill_tokens,
            "decodes": self.decodes,
            "context_tokens": self.context_tokens,
            "tokens": self.tokens,
            "compute_bound": self.compute_bound,
            "mode": self.mode,
        }


@dataclass(frozen=True, slots=True)
class ChunkingTimes:
    """Prefilling one prompt at several chunk sizes, against one iteration holding it all
    (``roofline --prompt``)."""

    ridge_tokens: float
    prompt_tokens: int
    decodes: int
    context_tokens: int
    mode: str
    one_shot_s: float
    chunked: tuple[ChunkedPrefill, ...]

    def below_ridge(self, result: ChunkedPrefill) -> bool:
        """Its chunks are too small to reach the compute-bound regime."""
        return result.chunk_tokens < self.ridge_tokens

    def to_json(self) -> dict[str, object]:
        return {
            "ridge_tokens": self.ridge_tokens,
            "prompt_tokens": self.prompt_tokens,
            "decodes": self.decodes,
            "context_tokens": self.context_tokens,
            "mode": self.mode,
            "one_shot_ms": self.one_shot_s * 1e3,
            "chunking": [
                {
                    "chunk_tokens": r.chunk_tokens,
                    "total_ms": r.total_s * 1e3,
                    "overhead_pct": r.overhead_pct,
                    "below_ridge": self.below_ridge(r),
                    "step_ms": [s * 1e3 for s in r.step_s],
                }
                for r in self.chunked
            ],
        }


def iteration_time(
    model: StepModel, chunks: list[PrefillChunk], decodes: int, context_tokens: int
) -> IterationTime:
    """One iteration holding ``chunks`` and ``decodes`` decodes at ``context_tokens``."""
    tokens = float(sum(c.tokens for c in chunks))
    pairs = float(sum(c.tokens * c.offset + c.tokens * c.tokens / 2.0 for c in chunks))
    prefixes = float(sum(c.offset for c in chunks))
    aggregates = (
        tokens,
        pairs,
        prefixes,
        decodes,
        float(decodes * context_tokens),
        float(len(chunks) or 1),  # the prompt chunks' sequences (their LM head, CPU time)
    )
    return IterationTime(
        ridge_tokens=model.ridge_tokens,
        step_s=model.step_time_s(*aggregates),
        prefill_tokens=int(tokens),
        decodes=decodes,
        context_tokens=context_tokens,
        compute_bound=model.compute_bound_of(*aggregates),
        mode=model.mode,
        comm_s=model.comm_time_s(tokens, decodes),
    )


def chunking_times(
    model: StepModel,
    prompt_tokens: int,
    chunk_sizes: list[int],
    decodes: int,
    context_tokens: int,
) -> ChunkingTimes:
    """Prefilling one prompt of ``prompt_tokens`` at each of ``chunk_sizes``."""
    return ChunkingTimes(
        ridge_tokens=model.ridge_tokens,
        prompt_tokens=prompt_tokens,
        decodes=decodes,
        context_tokens=context_tokens,
        mode=model.mode,
        one_shot_s=model.iteration_time_s([(prompt_tokens, 0)], [context_tokens] * decodes),
        chunked=tuple(
            chunked_prefill(
                model, prompt_tokens, size, decodes=decodes, context_tokens=context_tokens
            )
            for size in chunk_sizes
        ),
    )


@dataclass(frozen=True, slots=True)
class RooflineAnswer:
    """The answer to a roofline request: a prompt at several chunk sizes, or one iteration;
    ``asked_iteration``: the request named an iteration's contents (else the answer is about
    the ridge alone); ``calibration``: the one the model was built in."""

    times: IterationTime | ChunkingTimes
    asked_iteration: bool
    calibration: Calibration
    # tensor parallelism: one all-reduce's figures, the calls per iteration and an iteration
    # of ridge_tokens prompt tokens with its all-reduces' part (None on one GPU)
    allreduce: AllReduce | None = None
    allreduces: int = 0
    at_ridge: IterationTime | None = None

    def to_json(self) -> dict[str, object]:
        """The ``roofline --json`` document (the ridge alone when no iteration was asked)."""
        times = self.times
        cal = self.calibration
        where: dict[str, object] = {"calibration": cal.name, "calibration_source": cal.source}
        if self.allreduce is not None:
            where["allreduce"] = {**self.allreduce.to_json(), "per_iteration": self.allreduces}
        if self.at_ridge is not None:
            where["at_ridge"] = {
                "step_ms": self.at_ridge.step_s * 1e3,
                "comm_ms": self.at_ridge.comm_s * 1e3,
                "comm_share": self.at_ridge.comm_share,
            }
        if isinstance(times, IterationTime) and not self.asked_iteration:
            return {"ridge_tokens": times.ridge_tokens, "mode": times.mode, **where}  # no 0 ms
        return {**times.to_json(), **where}


def answer(request: RooflineRequest) -> RooflineAnswer:
    """Validate ``request`` and ask the step-time model. Raises SpecError naming the field."""
    from budgettune.app.step_model import calibration_of, gpu_of, step_model_of
    from budgettune.core.hardware import resolve_model
    from budgettune.model.allreduce import allreduce_for

    if request.decodes < 0:
        raise SpecError(f"must be zero or more, got {request.decodes}", field="decodes")
    if request.context < 0:
        raise SpecError(f"must be zero or more, got {request.context}", field="context")
    check_count(request.decodes, field="decodes", minimum=0, maximum=MAX_SEQS)
    check_tokens(request.context, field="context", minimum=0)
    if request.prompt is not None and request.prompt > 0:
        check_tokens(request.prompt, field="prompt")
    if len(request.prefill) > MAX_LIST_ITEMS:
        raise SpecError(f"at most {MAX_LIST_ITEMS} chunks in one iteration", field="prefill")
    if request.prompt is not None and request.prefill:
        raise SpecError(
            "asks a different question than --prefill; give one of them", field="prompt"
        )
    if request.prompt is not None and request.prompt <= 0:
        raise SpecError(
            f"must be a positive number of tokens, got {request.prompt}", field="prompt"
        )
    gpu = gpu_of(request.model)
    calibration = calibration_of(request.model, gpu)
    step_model = step_model_of(request.model, gpu)
    times: IterationTime | ChunkingTimes
    if request.prompt is not None:
        sizes = parse_int_list(request.chunk_sizes, field="chunk_sizes")
        times = chunking_times(step_model, request.prompt, sizes, request.decodes, request.context)
        asked = True
    else:
        chunks = [parse_prefill_chunk(text) for text in request.prefill]
        times = iteration_time(step_model, chunks, request.decodes, request.context)
        asked = bool(chunks or request.decodes)
    allreduce = allreduce_for(gpu, request.model.tensor_parallel)
    if allreduce is None:
        return RooflineAnswer(times, asked_iteration=asked, calibration=calibration)
    ridge_tokens = max(1, round(step_model.ridge_tokens))
    return RooflineAnswer(
        times,
        asked_iteration=asked,
        calibration=calibration,
        allreduce=allreduce,
        allreduces=allreduces(resolve_model(request.model.model).layers),
        at_ridge=iteration_time(step_model, [PrefillChunk(ridge_tokens)], 0, 0),
    )
