"""The KV blocks a traffic's requests share: each request's chain keys for the full blocks of its
shared prefix, and the share of prompt tokens an unbounded prefix cache would find cached.

Block j of prefix group g is the key (g, j): the load generator draws a group's prefix once
(:func:`budgettune.loadgen.runner.prompt_ids`), so every request of g holds the same tokens
there, and a request's own tokens are shared with nobody (no key). With exact shared blocks (a
Mooncake trace's tree), block j's key is the tree node holding its last token and j: the node
stands for every token before it too.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from budgettune.trace.schema import IntArray, SharedBlocks

DEFAULT_BLOCK_TOKENS = 16  # vLLM's KV block size


def prefix_block_keys(
    prompt_tokens: IntArray,
    prefix_group: IntArray | None,
    prefix_tokens: IntArray | None,
    block_size: int = DEFAULT_BLOCK_TOKENS,
    shared: SharedBlocks | None = None,
) -> list[Sequence[Hashable]]:
    """Each request's chain keys for the full blocks of its shared prefix (empty: none); from
    ``shared`` when given, else from the groups."""
    n = len(prompt_tokens)
    if shared is not None:
        return [_tree_keys(shared, i, int(prompt_tokens[i]), block_size) for i in range(n)]
    if prefix_group is None or prefix_tokens is None:
        return [()] * n
    groups = prefix_group.tolist()
    lengths = np.minimum(prefix_tokens, prompt_tokens).tolist()
    longest: dict[int, int] = {}
    for group, tokens in zip(groups, lengths, strict=True):
        if group >= 0:
            longest[group] = max(longest.get(group, 0), tokens // block_size)
    chains = {group: tuple((group, j) for j in range(blocks)) for group, blocks in longest.items()}
    return [
        chains[group][: tokens // block_size] if group >= 0 else ()
        for group, tokens in zip(groups, lengths, strict=True)
    ]


def _tree_keys(
    shared: SharedBlocks, index: int, prompt: int, block_size: int
) -> tuple[Hashable, ...]:
    """Request ``index``'s keys: ("tree", node holding the block's last token, block number)
    for each full block within its shared tokens."""
    nodes = shared.of(index)
    size = shared.block_tokens
    full = min(len(nodes) * size, prompt) // block_size
    return tuple(("tree", int(nodes[((j + 1) * block_size - 1) // size]), j) for j in range(full))


def unbounded_hit_share(
    prompt_tokens: IntArray,
    prefix_group: IntArray | None,
    prefix_tokens: IntArray | None,
    block_size: int = DEFAULT_BLOCK_TOKENS,
    shared: SharedBlocks | None = None,
) -> float | None:
    """Hit tokens over prompt tokens with a cache that never evicts, requests in order, each
    one done before the next (the traffic's own sharing, an upper bound for an engine): a
    request hits the run of its keys already seen, at most all but its last token (vLLM's
    rule). None for traffic that records no prefixes."""
    if shared is None and (prefix_group is None or prefix_tokens is None):
        return None
    total = int(prompt_tokens.sum())
    if total <= 0:
        return None
    seen: set[Hashable] = set()
    hits = 0
    keys = prefix_block_keys(prompt_tokens, prefix_group, prefix_tokens, block_size, shared)
    for prompt, chain in zip(prompt_tokens.tolist(), keys, strict=True):
        limit = min(len(chain), (prompt - 1) // block_size)
        matched = 0
        while matched < limit and chain[matched] in seen:
            matched += 1
        hits += matched * block_size
        seen.update(chain)
    return hits / total
