"""Recorded conversations (a ShareGPT-style file) as the lengths of their turns.

The file is a JSON array of conversations, or JSON Lines of one conversation each. A
conversation is an object whose ``conversations`` (ShareGPT) or ``messages`` (OpenAI's chat
form) list holds its messages, each ``{"from": "human" | "gpt" | "system", "value": TEXT}`` or
``{"role": "user" | "assistant" | "system", "content": TEXT}``. A turn is the user's messages up
to an answer and that answer; a system message opens the first turn's prompt; a last message
with no answer is left out (it has no output length). Counting tokens is the caller's (a
tokenizer lives above this layer): :func:`turn_lengths` takes the counter.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgettune.core.errors import TraceError, shorten

MAX_CONVERSATIONS_BYTES = 2 << 30  # ShareGPT V3 is about 0.7 GB; a file past 2 GB is refused
USER_ROLES = frozenset({"human", "user"})
ANSWER_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing"})
SYSTEM_ROLES = frozenset({"system"})


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn's texts: what the user adds (``said``, with a system message before the first)
    and the answer."""

    said: str
    answer: str


def read_conversations(path: Path) -> list[list[Turn]]:
    """Every conversation of ``path`` with at least one answered turn, in file order. Raises
    TraceError naming the file and the conversation for anything it cannot read as one."""
    where = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_CONVERSATIONS_BYTES:
            raise TraceError(f"{where}: {size / 2**30:.1f} GB, more than 2 GB of conversations")
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise TraceError(f"cannot read {where}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{where}: not UTF-8 text") from None
    items = _json_items(text, where)
    found = []
    for index, item in enumerate(items):
        turns = _turns(item, f"{where}: conversation {index + 1}")
        if turns:
            found.append(turns)
    if not found:
        raise TraceError(f"{where}: no conversation with an answered turn")
    return found


def _json_items(text: str, where: str) -> list[Any]:
    """A JSON array's items, or JSON Lines' values (one per non-empty line)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise TraceError(f"{where}: not JSON ({error.msg}, line {error.lineno})") from None
        return list(items)
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise TraceError(f"{where}: line {number} is not JSON ({error.msg})") from None
    return items


def _turns(item: object, where: str) -> list[Turn]:
    if not isinstance(item, dict):
        raise TraceError(f"{where}: expected an object, got {type(item).__name__}")
    messages = item.get("conversations", item.get("messages"))
    if not isinstance(messages, list):
        raise TraceError(f"{where}: no 'conversations' (or 'messages') list")
    turns: list[Turn] = []
    said: list[str] = []
    for number, message in enumerate(messages, start=1):
        role, text = _message(message, f"{where}, message {number}")
        if role in ANSWER_ROLES:
            if said:  # an answer with nothing asked before it opens no turn
                turns.append(Turn("\n".join(said), text))
                said = []
        else:
            said.append(text)
    return turns


def _message(message: object, where: str) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise TraceError(f"{where}: expected an object, got {type(message).__name__}")
    role = message.get("from", message.get("role"))
    text = message.get("value", message.get("content"))
    if not isinstance(role, str) or not isinstance(text, str):
        raise TraceError(f"{where}: expected 'from' and 'value' (or 'role' and 'content') texts")
    role = role.strip().lower()
    if role not in USER_ROLES | ANSWER_ROLES | SYSTEM_ROLES:
        raise TraceError(f"{where}: unknown role {shorten(repr(role))}")
    return role, text


def turn_lengths(
    conversations: Sequence[Sequence[Turn]], count_tokens: Callable[[list[str]], Sequence[int]]
) -> list[list[tuple[int, int]]]:
    """Each conversation's turns as (new prompt tokens, answer tokens), every text counted by
    one call of ``count_tokens`` (a batch); an answer counts at least one token (the engine
    emits one)."""
    texts = [text for turns in conversations for turn in turns for text in (turn.said, turn.answer)]
    counts = iter(count_tokens(texts))
    return [[(next(counts), max(1, next(counts))) for _ in turns] for turns in conversations]
