"""`trace inspect` and `trace synth`: load-and-summarise, synthesize-and-write. No flag parsing,
no printing; warnings go to the caller's callback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from budgettune.core.errors import SpecError, shorten
from budgettune.trace.conversations import read_conversations
from budgettune.trace.dists import LengthDist
from budgettune.trace.inspect import TraceStats, trace_stats
from budgettune.trace.load import load_trace
from budgettune.trace.schema import LoadReport, Trace
from budgettune.trace.synth import (
    DEFAULT_THINK_TIME_S,
    recorded_conversations,
    synthesize,
    write_jsonl,
)


def inspect_trace(
    path: str | Path,
    *,
    format: str | None = None,
    columns: str | None = None,
    max_model_len: int | None = None,
    on_long: str = "error",
    strict: bool = False,
    on_warning: Callable[[str], None] | None = None,
) -> tuple[TraceStats, LoadReport]:
    """Statistics of the trace at ``path`` and the report of its loading (see load_trace)."""
    trace, report = load_trace(
        path,
        format=format,
        columns=columns,
        max_model_len=max_model_len,
        on_long=on_long,
        strict=strict,
        on_warning=on_warning,
    )
    return trace_stats(trace), report


def synth_trace(
    output: str | Path,
    *,
    prompt_dist: LengthDist,
    output_dist: LengthDist,
    rate_per_s: float,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    arrivals: str = "poisson",
    burstiness: float = 1.0,
    prefix_groups: int = 0,
    prefix_tokens: int = 0,
    conversation_turns: int = 0,
    think_time_s: float = DEFAULT_THINK_TIME_S,
    conversations: Path | None = None,
    tokenizer: str | None = None,
) -> TraceStats:
    """Synthesize a trace, write it to ``output`` ("-": stdout) as budgettune JSON Lines, and
    return its statistics. With ``conversations`` (a ShareGPT-style file) the turns' lengths
    are that file's, counted by ``tokenizer`` (a model folder, a tokenizer.json, or a model id
    in the Hugging Face cache), and ``conversation_turns`` caps the turns of each."""
    if conversations is not None:
        trace = _recorded(
            conversations, tokenizer, rate_per_s=rate_per_s, requests=requests,
            duration_s=duration_s, seed=seed, arrivals=arrivals, burstiness=burstiness,
            prefix_groups=prefix_groups, prefix_tokens=prefix_tokens,
            max_turns=conversation_turns, think_time_s=think_time_s,
        )  # fmt: skip
        write_jsonl(trace, output)
        return trace_stats(trace)
    trace = synthesize(
        prompt_dist=prompt_dist,
        output_dist=output_dist,
        rate_per_s=rate_per_s,
        requests=requests,
        duration_s=duration_s,
        seed=seed,
        arrivals=arrivals,
        burstiness=burstiness,
        prefix_groups=prefix_groups,
        prefix_tokens=prefix_tokens,
        conversation_turns=conversation_turns,
        think_time_s=think_time_s,
    )
    write_jsonl(trace, output)
    return trace_stats(trace)


def _recorded(
    path: Path,
    tokenizer: str | None,
    *,
    prefix_groups: int,
    prefix_tokens: int,
    max_turns: int,
    **timing: Any,
) -> Trace:
    """The turns of the conversations in ``path``, counted by ``tokenizer``."""
    if tokenizer is None:
        raise SpecError(
            "a conversation file holds text: give --tokenizer (a model folder, a "
            "tokenizer.json, or a model id in the Hugging Face cache) to count its tokens",
            field="tokenizer",
        )
    if prefix_groups or prefix_tokens:
        raise SpecError(
            "a conversation's turns share its history; give --conversations or "
            "--prefix-groups, not both",
            field="conversations",
        )
    from tokenizers import Tokenizer

    from budgettune.loadgen.text_prompts import tokenizer_file

    found = tokenizer_file(tokenizer)
    if found is None:
        raise SpecError(
            f"no tokenizer.json at {tokenizer} (a model folder, the file, or a model id in "
            "the Hugging Face cache; nothing is downloaded)",
            field="tokenizer",
        )
    try:
        counter = Tokenizer.from_file(str(found))
    except Exception as error:  # tokenizers raises a bare Exception for a bad file
        raise SpecError(
            f"cannot read {found} as a tokenizer: {shorten(str(error))}", field="tokenizer"
        ) from None
    recorded = read_conversations(path)

    def count_tokens(texts: list[str]) -> list[int]:
        encoded = counter.encode_batch(texts, add_special_tokens=False)
        return [len(item.ids) for item in encoded]

    return recorded_conversations(
        recorded, count_tokens, max_turns=max_turns, source=str(path), **timing
    )
