"""Prompts as text that the server's own tokenizer turns into exactly the scheduled number of
tokens. A real request reaches the engine as text and is tokenized before it is scheduled; token
ids skip that work, and so read a lower TTFT than the user's requests would see.

The text is built from the tokenizer's own vocabulary: words of ASCII letters that are one
token alone and stay one token each when joined by spaces. A prompt of N ids becomes N words
(less the special tokens the tokenizer adds, a BOS), one word per id, so requests that share
ids (a prefix group) share words. Every text is encoded again and its length checked: a
tokenizer that merges across words is repaired word by word or refused, never sent short.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from budgettune.core.errors import UserError

TOKENIZER_FILE = "tokenizer.json"
MAX_WORDS = 512  # more than the ids drawn (10-249), so each id keeps a word of its own
MIN_WORDS = 16
_WORD_LETTERS = range(2, 11)  # short words: common in every vocabulary, cheap to check
_REPAIR_TRIES = 4
_FORM_HINT = "give another tokenizer with --tokenizer, or send token ids with --prompt-form ids"


class TextPrompts:
    """Text prompts for one tokenizer (a ``tokenizers.Tokenizer``); ``source`` names it."""

    def __init__(self, tokenizer: Any, source: str) -> None:
        self.tokenizer = tokenizer
        self.source = source
        self.words = single_token_words(tokenizer)
        if len(self.words) < MIN_WORDS:
            raise UserError(
                f"the tokenizer {source} has {len(self.words)} words of one token each "
                f"(text prompts need {MIN_WORDS})",
                field="tokenizer",
                hint=_FORM_HINT,
            )
        probe = self.words[0]
        self.added_tokens = len(self._encode([probe])[0]) - 1  # a BOS, where it adds one

    def _encode(self, texts: Sequence[str]) -> list[list[int]]:
        encoded = self.tokenizer.encode_batch(list(texts), add_special_tokens=True)
        return [item.ids for item in encoded]

    def _words(self, ids: Sequence[int], count: int) -> list[str]:
        words = self.words
        picked = [words[token % len(words)] for token in ids[:count]]
        while len(picked) < count:  # only when a repair adds words past the ids
            picked.append(words[len(picked) % len(words)])
        return picked

    def texts(self, prompts: Sequence[Sequence[int]]) -> list[str]:
        """One text per prompt of ids, each encoding (with the tokenizer's special tokens, as
        the server encodes it) to exactly ``len(ids)`` tokens. A prompt shorter than the special
        tokens plus one word cannot be text: UserError, as for a tokenizer that will not give
        the length after a few repairs."""
        counts = [len(ids) - self.added_tokens for ids in prompts]
        for index, count in enumerate(counts):
            if count < 1:
                raise UserError(
                    f"request {index}: a prompt of {len(prompts[index])} tokens cannot be text on "
                    f"{self.source}, which adds {self.added_tokens} special tokens to any text",
                    field="prompt_form",
                    hint="send token ids with --prompt-form ids",
                )
        texts = [" ".join(self._words(ids, n)) for ids, n in zip(prompts, counts, strict=True)]
        pending = list(range(len(texts)))
        for _ in range(_REPAIR_TRIES):
            lengths = [len(ids) for ids in self._encode([texts[i] for i in pending])]
            off = [(i, len(prompts[i]) - got) for i, got in zip(pending, lengths, strict=True)]
            pending = [i for i, missing in off if missing != 0]
            if not pending:
                return texts
            for i, missing in off:
                if missing != 0:
                    counts[i] = max(1, counts[i] + missing)
                    texts[i] = " ".join(self._words(prompts[i], counts[i]))
        first = pending[0]
        raise UserError(
            f"the tokenizer {self.source} does not encode request {first}'s text to its "
            f"{len(prompts[first])} tokens",
            field="tokenizer",
            hint=_FORM_HINT,
        )


def single_token_words(tokenizer: Any) -> tuple[str, ...]:
    """Up to MAX_WORDS lowercase ASCII words of 2-10 letters, in vocabulary order, that the
    tokenizer encodes as one token alone and as two tokens when one is written twice with a
    space between (so a space-joined run of them is one token per word)."""
    vocabulary = tokenizer.get_vocab(with_added_tokens=False)
    candidates: list[str] = []
    seen: set[str] = set()
    token_ids = sorted(vocabulary.values())
    decoded = tokenizer.decode_batch([[token_id] for token_id in token_ids])
    for text in decoded:
        word = text.strip()
        if word in seen or len(word) not in _WORD_LETTERS:
            continue
        if word.isascii() and word.isalpha() and word.islower():
            seen.add(word)
            candidates.append(word)
    alone = tokenizer.encode_batch(candidates, add_special_tokens=False)
    twice = tokenizer.encode_batch([f"{w} {w}" for w in candidates], add_special_tokens=False)
    words = [
        word
        for word, one, two in zip(candidates, alone, twice, strict=True)
        if len(one.ids) == 1 and len(two.ids) == 2
    ]
    return tuple(words[:MAX_WORDS])


def tokenizer_file(model_or_path: str) -> Path | None:
    """The ``tokenizer.json`` for a model: the file itself, the one in a model folder, or the
    one in the Hugging Face cache's newest snapshot of a model id (never downloaded). None when
    there is none at hand."""
    path = Path(model_or_path).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        found = path / TOKENIZER_FILE
        return found if found.is_file() else None
    if model_or_path.count("/") != 1:
        return None
    snapshots = _hub_cache() / f"models--{model_or_path.replace('/', '--')}" / "snapshots"
    try:
        found_files = [s / TOKENIZER_FILE for s in snapshots.iterdir()]
    except OSError:
        return None
    present = [f for f in found_files if f.is_file()]
    return max(present, key=lambda f: f.stat().st_mtime) if present else None


def _hub_cache() -> Path:
    """Hugging Face's hub cache, as huggingface_hub finds it: $HF_HUB_CACHE, $HF_HOME/hub, or
    ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"
    )
    return Path(home).expanduser() / "hub"


@functools.lru_cache(maxsize=4)
def text_prompts(tokenizer_path: str) -> TextPrompts:
    """The :class:`TextPrompts` of a ``tokenizer.json`` (loaded once per process). UserError
    when it cannot be read as a tokenizer."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError(
            "text prompts need the tokenizers package",
            field="prompt_form",
            hint="pip install tokenizers, or send token ids with --prompt-form ids",
        ) from None
    try:
        tokenizer = Tokenizer.from_file(tokenizer_path)
    except Exception as error:  # tokenizers raises a bare Exception for a bad file
        raise UserError(
            f"cannot read {tokenizer_path} as a tokenizer: {str(error)[:200]}",
            field="tokenizer",
            hint="give a model folder or a tokenizer.json with --tokenizer",
        ) from None
    return TextPrompts(tokenizer, tokenizer_path)
