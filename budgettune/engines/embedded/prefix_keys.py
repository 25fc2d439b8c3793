"""The embedded engine's prefix-cache keys, read from what a request really sent, as vLLM hashes
a prompt: one key per full block, chained (a block's key stands for every block before it too),
so two requests share a key exactly when their prompts agree up to that block's end.

Token ids make blocks of ``block_size`` ids; text makes blocks of ``block_size`` x 4 UTF-8 bytes,
the engine's own count of a text token (:data:`validate.BYTES_PER_TEXT_TOKEN`).
"""

from __future__ import annotations

from collections.abc import Sequence

from budgettune.engines.embedded.validate import BYTES_PER_TEXT_TOKEN


def block_keys(content: Sequence[int] | bytes, block_size: int) -> tuple[int, ...]:
    """Chain keys of the full blocks of ``content`` (token ids, or a text's UTF-8 bytes)."""
    step = block_size if not isinstance(content, bytes) else block_size * BYTES_PER_TEXT_TOKEN
    keys: list[int] = []
    key = 0
    for start in range(0, len(content) - step + 1, step):
        block = content[start : start + step]
        key = hash((key, block if isinstance(block, bytes) else tuple(block)))
        keys.append(key)
    return tuple(keys)
