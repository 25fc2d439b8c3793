"""Multi-turn conversations: `trace synth --conversation-turns` makes each turn's prompt the
conversation so far, the load generator sends every turn as a prefix of its conversation's
tokens, and a prefix cache (the expected share, the simulator, the built-in engine) hits each
turn's history."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.errors import SpecError
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.loadgen.runner import RunOptions, Target, prompt_ids, run_schedule
from budgettune.loadgen.server_metrics import server_side
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.inspect import trace_stats
from budgettune.trace.prefix_blocks import unbounded_hit_share
from budgettune.trace.replay import ReplayOptions, schedule_from_trace
from budgettune.trace.schedule import Schedule
from budgettune.trace.synth import synthesize

PROMPT = parse_length_dist("uniform:min=100,max=300", field="prompt_dist")
OUTPUT = parse_length_dist("uniform:min=20,max=60", field="output_dist")


def _conversations(**kwargs: object) -> object:
    options = dict(prompt_dist=PROMPT, output_dist=OUTPUT, rate_per_s=4.0, requests=400,
                   seed=3, conversation_turns=4, think_time_s=5.0)  # fmt: skip
    options.update(kwargs)
    return synthesize(**options)  # type: ignore[arg-type]


def _hand_hits(groups: np.ndarray, prompts: np.ndarray) -> int:
    """Each turn hits the full 16-token blocks of the longest earlier turn of its conversation."""
    longest: dict[int, int] = {}
    hits = 0
    for group, prompt in zip(groups.tolist(), prompts.tolist(), strict=True):
        before = longest.get(group, 0)
        hits += min(before // 16, (prompt - 1) // 16) * 16
        longest[group] = max(before, prompt)
    return hits


def test_each_turn_is_the_conversation_so_far() -> None:
    trace = _conversations()
    assert len(trace) == 400 and trace.prefix_group is not None and trace.prefix_tokens is not None
    assert np.all(np.diff(trace.arrival_s) >= 0)
    assert np.array_equal(trace.prefix_tokens, trace.prompt_tokens)
    for group in np.unique(trace.prefix_group)[:20]:
        turns = np.flatnonzero(trace.prefix_group == group)
        prompts, answers = trace.prompt_tokens[turns], trace.output_tokens[turns]
        # turn k + 1 holds turn k's prompt and answer, then at least 100 new tokens
        assert np.all(prompts[1:] >= prompts[:-1] + answers[:-1] + 100)
        assert np.all(prompts[1:] <= prompts[:-1] + answers[:-1] + 300)
    expected = unbounded_hit_share(trace.prompt_tokens, trace.prefix_group, trace.prefix_tokens)
    hand = _hand_hits(trace.prefix_group, trace.prompt_tokens)
    assert expected == pytest.approx(hand / trace.prompt_tokens.sum())
    stats = trace_stats(trace)
    assert stats.cache_hit_share == expected
    # every turn but a conversation's last shares all of its prompt with the next
    assert stats.shared_prefix_token_share is not None and stats.shared_prefix_token_share < 1


def test_turns_are_prefixes_of_one_token_stream() -> None:
    schedule = schedule_from_trace(_conversations(requests=40), ReplayOptions())
    assert schedule.prefix_group is not None
    options = RunOptions(content_salt=11)
    group = int(schedule.prefix_group[0])
    turns = np.flatnonzero(schedule.prefix_group == group)
    ids = [prompt_ids(schedule, int(i), options) for i in turns]
    assert len(ids) >= 2
    for shorter, longer in itertools.pairwise(ids):
        assert longer[: len(shorter)] == shorter
    other = np.flatnonzero(schedule.prefix_group != group)[0]
    assert prompt_ids(schedule, int(other), options)[:16] != ids[0][:16]


def test_bad_options_are_refused() -> None:
    with pytest.raises(SpecError, match="not both"):
        _conversations(prefix_groups=2, prefix_tokens=64)
    with pytest.raises(SpecError) as caught:
        _conversations(think_time_s=0.0)
    assert caught.value.field == "think_time"


def test_the_engine_hits_each_turns_history() -> None:
    # Two conversations of three turns, 1.5 s apart (each turn done before the next).
    prompts = np.array([200, 200, 470, 500, 800, 900])
    schedule = Schedule(
        target_s=np.arange(6) * 1.5,
        prompt_tokens=prompts,
        output_tokens=np.full(6, 4),
        prefix_group=np.array([0, 1, 0, 1, 0, 1]),
        prefix_tokens=prompts.copy(),
    )
    hits = _hand_hits(schedule.prefix_group, prompts)  # type: ignore[arg-type]
    assert hits == 192 + 192 + 464 + 496

    async def replay() -> PrefixCacheCount | None:
        async with SimEngine().launch(LaunchSpec(budget_tokens=1024, prefix_caching=True)) as h:
            outcome = await run_schedule(schedule, Target(h.url, h.model), RunOptions())
        return PrefixCacheCount.from_counters(
            server_side(outcome.server_before, outcome.server_after).counters
        )

    assert asyncio.run(replay()) == PrefixCacheCount(int(prompts.sum()), hits)
