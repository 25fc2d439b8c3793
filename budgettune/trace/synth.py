"""Synthetic traces: seeded arrivals and length distributions, optional shared prefixes, and the
writer of budgettune's own JSON Lines format (one request a line).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from budgettune.core.errors import SpecError
from budgettune.core.files import atomic_writer, check_overwrite, stdout_or_error
from budgettune.core.limits import MAX_DURATION_S, MAX_TOKENS, check_count
from budgettune.trace.conversations import Turn, turn_lengths
from budgettune.trace.dists import LengthDist
from budgettune.trace.schedule import bounded_arrival_times_s, check_burstiness
from budgettune.trace.schema import FloatArray, IntArray, Trace

DEFAULT_THINK_TIME_S = 10.0  # a user reads the answer and types the next turn
MAX_TURNS = 1000


def synthesize(
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
) -> Trace:
    """A seeded synthetic trace. Draw order (times, prompts, outputs) matches
    :func:`~budgettune.trace.schedule.synthetic_schedule`, so with ``requests`` alone the two
    give the same requests for the same seed. With ``prefix_groups`` G > 0 each request joins
    one of G groups at random whose first ``prefix_tokens`` tokens (at most its prompt) are
    shared, like a system prompt. With ``conversation_turns`` T > 0 the requests are the turns of
    conversations instead (:func:`conversations`)."""
    if conversation_turns:
        if prefix_groups or prefix_tokens:
            raise SpecError(
                "a conversation's turns share its history; give --conversation-turns or "
                "--prefix-groups, not both",
                field="conversation_turns",
            )
        return conversations(
            prompt_dist=prompt_dist, output_dist=output_dist, rate_per_s=rate_per_s,
            requests=requests, duration_s=duration_s, seed=seed, arrivals=arrivals,
            burstiness=burstiness, turns=conversation_turns, think_time_s=think_time_s,
        )  # fmt: skip
    if arrivals not in ("poisson", "gamma"):
        raise SpecError(
            f"synthetic traces use poisson or gamma, not {arrivals!r}", field="arrivals"
        )
    check_burstiness(burstiness, arrivals)
    check_count(seed, field="seed", minimum=0, maximum=2**64 - 1)
    for name, value in (("prefix_groups", prefix_groups), ("prefix_tokens", prefix_tokens)):
        if value < 0:
            raise SpecError(f"must not be negative, got {value}", field=name)
        check_count(value, field=name, minimum=0, maximum=MAX_TOKENS)
    if (prefix_groups > 0) != (prefix_tokens > 0):
        raise SpecError(
            "give both --prefix-groups and --prefix-tokens (or neither)",
            field="prefix_groups" if prefix_tokens > 0 else "prefix_tokens",
        )
    rng = np.random.default_rng(seed)
    times = bounded_arrival_times_s(
        rng,
        rate_per_s,
        requests=requests,
        duration_s=duration_s,
        process=arrivals,
        burstiness=burstiness,
    )
    n = len(times)
    prompt = prompt_dist.sample(rng, n)
    output = output_dist.sample(rng, n)
    group = shared = None
    if prefix_groups:
        group = rng.integers(0, prefix_groups, size=n).astype(np.int64)
        shared = np.minimum(prompt, prefix_tokens).astype(np.int64)
    return Trace(
        prompt_tokens=prompt,
        output_tokens=output,
        arrival_s=times,
        prefix_group=group,
        prefix_tokens=shared,
        source="synthetic",
        format="budgettune",
    )


def conversations(
    *,
    prompt_dist: LengthDist,
    output_dist: LengthDist,
    rate_per_s: float,
    turns: int,
    think_time_s: float,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    arrivals: str = "poisson",
    burstiness: float = 1.0,
) -> Trace:
    """Multi-turn conversations: they start at ``rate_per_s / turns`` (so requests arrive at
    ``rate_per_s`` on average), each of ``turns`` turns, a turn sent an exponential think time
    (mean ``think_time_s``) after the one before. Turn k's prompt is the conversation so far:
    turn k - 1's prompt, its answer (of turn k - 1's output length) and new text from
    ``prompt_dist``, at most MAX_TOKENS. Every turn's prompt is a prefix of its conversation's
    token stream (``prefix_group`` the conversation, ``prefix_tokens`` the whole prompt), so the
    next turn repeats all of it; a turn's answer is replayed as text the load generator draws,
    not as the engine's own answer, so a cache hits the history a turn sent, not its answer."""
    check_count(turns, field="conversation_turns", minimum=1, maximum=MAX_TURNS)
    _check_conversation_options(think_time_s, burstiness, arrivals, seed)
    rng = np.random.default_rng(seed)
    starts = bounded_arrival_times_s(
        rng,
        rate_per_s / turns,
        requests=None if requests is None else -(-requests // turns),
        duration_s=duration_s,
        process=arrivals,
        burstiness=burstiness,
    )
    count = len(starts)
    new_text = prompt_dist.sample(rng, count * turns).reshape(count, turns)
    answers = output_dist.sample(rng, count * turns).reshape(count, turns)
    return _conversation_trace(
        rng, starts, list(new_text), list(answers), think_time_s, requests, duration_s,
        "synthetic",
    )  # fmt: skip


def recorded_conversations(
    recorded: Sequence[Sequence[Turn]],
    count_tokens: Callable[[list[str]], Sequence[int]],
    *,
    rate_per_s: float,
    think_time_s: float,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
    arrivals: str = "poisson",
    burstiness: float = 1.0,
    max_turns: int = 0,
    source: str = "conversations",
) -> Trace:
    """Recorded conversations (:func:`~budgettune.trace.conversations.read_conversations`)
    replayed as :func:`conversations` replays drawn ones: each started conversation is the next
    of a seeded shuffle of them (over again when they run out), conversations start at
    ``rate_per_s`` over their mean turns, a think time apart within one, and turn k's prompt is
    the conversation so far. ``count_tokens`` counts a batch of texts; only the conversations
    replayed are counted. ``max_turns`` > 0 keeps at most that many turns of each."""
    _check_conversation_options(think_time_s, burstiness, arrivals, seed)
    if max_turns:
        check_count(max_turns, field="conversation_turns", minimum=1, maximum=MAX_TURNS)
    kept = [turns[:max_turns] if max_turns else turns for turns in recorded if turns]
    if not kept:
        raise SpecError("no conversation with an answered turn", field="conversations")
    rng = np.random.default_rng(seed)
    mean_turns = float(np.mean([len(turns) for turns in kept]))
    starts = bounded_arrival_times_s(
        rng,
        rate_per_s / mean_turns,
        requests=requests,  # at least one turn each: enough conversations for any count
        duration_s=duration_s,
        process=arrivals,
        burstiness=burstiness,
    )
    rounds = -(-len(starts) // len(kept))
    order = np.concatenate([rng.permutation(len(kept)) for _ in range(rounds)])[: len(starts)]
    used = sorted(set(order.tolist()))
    counted = dict(zip(used, turn_lengths([kept[i] for i in used], count_tokens), strict=True))
    new_text = [np.array([said for said, _ in counted[i]], dtype=np.int64) for i in order]
    answers = [np.array([answer for _, answer in counted[i]], dtype=np.int64) for i in order]
    return _conversation_trace(
        rng, starts, new_text, answers, think_time_s, requests, duration_s, source
    )


def _check_conversation_options(
    think_time_s: float, burstiness: float, arrivals: str, seed: int
) -> None:
    if not 0 < think_time_s <= MAX_DURATION_S:
        raise SpecError(f"must be positive, got {think_time_s!r} s", field="think_time")
    check_burstiness(burstiness, arrivals)
    check_count(seed, field="seed", minimum=0, maximum=2**64 - 1)


def _conversation_trace(
    rng: np.random.Generator,
    starts: FloatArray,
    new_text: Sequence[IntArray],
    answers: Sequence[IntArray],
    think_time_s: float,
    requests: int | None,
    duration_s: float | None,
    source: str,
) -> Trace:
    """The turns of conversations starting at ``starts`` (conversation c's turns: new text
    ``new_text[c]``, answers ``answers[c]``), in arrival order, the first ``requests`` and those
    before ``duration_s``: turn k's prompt is every earlier turn's text and answer and its own
    text (at most MAX_TOKENS), and shares all of it with the turn after."""
    lengths = np.array([len(row) for row in new_text], dtype=np.int64)
    flat_text = np.concatenate(new_text).astype(np.int64)
    flat_answers = np.concatenate(answers).astype(np.int64)
    gaps = rng.exponential(think_time_s, size=len(flat_text))
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    gaps[first] = 0.0
    conversation = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    times = np.repeat(starts, lengths) + _cumsum_within(gaps, first, lengths)
    history = _cumsum_within(flat_text + flat_answers, first, lengths) - flat_answers
    prompts = np.minimum(history, MAX_TOKENS).astype(np.int64)
    order = np.argsort(times, kind="stable")
    keep = order if requests is None else order[:requests]
    if duration_s is not None:
        keep = keep[times[keep] < duration_s]
    prompt = prompts[keep]
    return Trace(
        prompt_tokens=prompt,
        output_tokens=flat_answers[keep],
        arrival_s=times[keep],
        prefix_group=conversation[keep],
        prefix_tokens=prompt.copy(),
        source=source,
        format="budgettune",
    )


def _cumsum_within(values: npt.NDArray[Any], first: IntArray, lengths: IntArray) -> Any:
    """Running sums of ``values`` restarting at each group's first index, each group summed on
    its own (a running total less an offset would round differently)."""
    if len(lengths) and (lengths == lengths[0]).all():
        return np.cumsum(values.reshape(len(lengths), int(lengths[0])), axis=1).ravel()
    return np.concatenate([np.cumsum(part) for part in np.split(values, first[1:])])


def jsonl_lines(trace: Trace) -> Iterator[str]:
    """budgettune JSON Lines for ``trace`` (arrival_s rounded to the microsecond)."""
    arrival = None if trace.arrival_s is None else np.round(trace.arrival_s, 6).tolist()
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    group = None if trace.prefix_group is None else trace.prefix_group.tolist()
    shared = None if trace.prefix_tokens is None else trace.prefix_tokens.tolist()
    for i in range(len(trace)):
        row: dict[str, float | int] = {}
        if arrival is not None:
            row["arrival_s"] = arrival[i]
        row["prompt_tokens"] = prompt[i]
        row["output_tokens"] = output[i]
        if group is not None and shared is not None and group[i] >= 0:
            row["prefix_group"] = group[i]
            row["prefix_tokens"] = shared[i]
        yield json.dumps(row, separators=(", ", ": "))


TRACE_KEYS = frozenset({"arrival_s", "prompt_tokens", "output_tokens", "prefix_group",
                        "prefix_tokens"})  # fmt: skip


def is_budgettune_trace(head: bytes) -> bool:
    """Whether a file's first bytes are a trace in budgettune's JSON Lines (what `trace synth`
    writes): a first line that is an object of the trace's keys only."""
    first = head.split(b"\n", 1)[0].strip()
    try:
        row = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(row, dict) and bool(row) and set(row) <= TRACE_KEYS


def write_jsonl(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as budgettune JSON Lines to ``path`` ("-" for stdout), atomically and
    over a trace budgettune wrote only. Raises UserError (field ``output``) when the path is a
    folder, someone else's file or cannot be written, StorageError when the disk is full."""
    if str(path) == "-":
        stdout = stdout_or_error("the trace")
        for line in jsonl_lines(trace):
            stdout.write(line + "\n")
        stdout.flush()
        return
    target = Path(path)
    check_overwrite(target, is_budgettune_trace, field="output", what="trace file")
    with atomic_writer(target, field="output") as out:
        for line in jsonl_lines(trace):
            out.write(line + "\n")
