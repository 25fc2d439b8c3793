"""Recorded conversations (`trace synth --conversations FILE --tokenizer T`): a ShareGPT-style
file read into turns, each turn's text and answer counted by the tokenizer, and replayed as the
synthetic conversations are (turn k's prompt is the conversation so far, one prefix group per
conversation), so the traffic's expected cache share follows from the file."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from budgettune.core.errors import SpecError, TraceError
from budgettune.trace.conversations import Turn, read_conversations, turn_lengths
from budgettune.trace.synth import recorded_conversations

SHAREGPT = [
    {"id": "a", "conversations": [
        {"from": "system", "value": "be brief"},
        {"from": "human", "value": "one two three"},
        {"from": "gpt", "value": "four five"},
        {"from": "human", "value": "six"},
        {"from": "gpt", "value": "seven eight nine ten"},
        {"from": "human", "value": "left unanswered"},
    ]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "an answer to nothing"}]},
    {"id": "c", "conversations": [
        {"from": "human", "value": "alpha"}, {"from": "human", "value": "beta gamma"},
        {"from": "gpt", "value": "delta"},
    ]},
]  # fmt: skip


def words(texts: list[str]) -> list[int]:
    return [len(text.split()) for text in texts]


def test_a_sharegpt_file_is_read_into_answered_turns(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    found = read_conversations(path)
    # b has no turn (an answer with nothing asked); a's last message has no answer
    assert found == [
        [Turn("be brief\none two three", "four five"), Turn("six", "seven eight nine ten")],
        [Turn("alpha\nbeta gamma", "delta")],
    ]
    assert turn_lengths(found, words) == [[(5, 2), (1, 4)], [(3, 1)]]
    # OpenAI's chat form, one conversation a line
    lines = tmp_path / "chats.jsonl"
    lines.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi there"},
                                 {"role": "assistant", "content": "hello"}]}) + "\n\n"
    )  # fmt: skip
    assert read_conversations(lines) == [[Turn("hi there", "hello")]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{", "not JSON"),
        ('[{"id": 1}]', "conversation 1: no 'conversations' (or 'messages') list"),
        ('[{"conversations": [{"from": "robot", "value": "x"}]}]', "unknown role 'robot'"),
        ('[{"conversations": [{"from": "human"}]}]', "message 1: expected 'from' and 'value'"),
        ('[{"conversations": [{"from": "human", "value": "x"}]}]', "no conversation with an"),
        ("[3]", "conversation 1: expected an object, got int"),
    ],
)
def test_a_file_that_is_not_conversations_is_refused_by_place(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=re.escape(message)):
        read_conversations(path)


def test_turns_replay_as_the_conversation_so_far() -> None:
    recorded = [
        [Turn("a b c", "d e"), Turn("f", "g h i j")],
        [Turn("k l m n", "o")],
    ]
    counted: list[list[str]] = []

    def count(texts: list[str]) -> list[int]:
        counted.append(texts)
        return words(texts)

    trace = recorded_conversations(recorded, count, rate_per_s=50.0, think_time_s=1.0, requests=30)
    assert len(trace) == 30
    assert len(counted) == 1  # one batch, every conversation replayed counted once
    assert trace.prefix_group is not None and trace.prefix_tokens is not None
    assert np.array_equal(trace.prefix_tokens, trace.prompt_tokens)  # the whole prompt shared on
    for group in np.unique(trace.prefix_group):
        turns = np.flatnonzero(trace.prefix_group == group)
        prompts = trace.prompt_tokens[turns].tolist()
        outputs = trace.output_tokens[turns].tolist()
        # conversation 1: 3 tokens, then 3 + 2 + 1 = 6; conversation 2: 4
        assert (prompts, outputs) in (([3, 6], [2, 4]), ([3], [2]), ([4], [1]))
    assert np.all(np.diff(trace.arrival_s) >= 0)
    capped = recorded_conversations(
        recorded, words, rate_per_s=50.0, think_time_s=1.0, requests=30, max_turns=1
    )
    assert set(capped.prompt_tokens.tolist()) == {3, 4}  # only each conversation's first turn


def test_only_the_conversations_replayed_are_counted() -> None:
    recorded = [[Turn(f"text {i}", "answer")] for i in range(1000)]
    counted: list[str] = []

    def count(texts: list[str]) -> list[int]:
        counted.extend(texts)
        return words(texts)

    trace = recorded_conversations(recorded, count, rate_per_s=5.0, think_time_s=1.0, requests=4)
    assert len(trace) == 4 and len(counted) == 8  # 4 conversations, a text and an answer each
    with pytest.raises(SpecError, match="no conversation with an answered turn"):
        recorded_conversations([[]], words, rate_per_s=5.0, think_time_s=1.0, requests=4)


def test_trace_synth_reads_conversations_with_a_tokenizer(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    from budgettune.app.tiny_model import train_tokenizer

    tokenizer = tmp_path / "tokenizer.json"
    train_tokenizer(4096, seed=0).save(str(tokenizer))
    path = tmp_path / "sharegpt.json"
    long = [{"conversations": [
        {"from": "human", "value": "tell me about the weather " * 20},
        {"from": "gpt", "value": "it rains and then the sun comes out " * 10},
        {"from": "human", "value": "and tomorrow " * 15},
        {"from": "gpt", "value": "more of the same " * 12},
    ]} for _ in range(3)]  # fmt: skip
    path.write_text(json.dumps(long))
    out = tmp_path / "conv.jsonl"
    done = subprocess.run(
        [*budgettune_cmd, "trace", "synth", "--conversations", str(path), "--tokenizer",
         str(tokenizer), "--rate", "2", "--requests", "9", "--think-time", "3s", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 9 and all(row["prefix_tokens"] == row["prompt_tokens"] for row in rows)
    inspected = subprocess.run(
        [*budgettune_cmd, "trace", "inspect", str(out), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert 0 < json.loads(inspected.stdout)["cache_hit_share"] < 1
    missing = subprocess.run(
        [*budgettune_cmd, "trace", "synth", "--conversations", str(path), "--rate", "2",
         "--requests", "9", "-o", str(tmp_path / "x.jsonl")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert "--tokenizer: a conversation file holds text" in " ".join(missing.stderr.split())
