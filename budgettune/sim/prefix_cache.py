"""A KV block pool with a prefix cache, as vLLM V1 keeps one (``KVCacheManager`` over a
``BlockPool`` with a free-block queue): full prompt blocks are identified by a chain key (a block
matches only if every block before it matches), a freed block keeps its content until the pool
hands it out again, and the pool hands out free blocks least recently freed first.

Keys are any hashable values; the caller makes them chain keys (the key of block j stands for
the prompt's whole first j + 1 blocks). Blocks without a key (a request's own content) are
counted, never matched.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence

from budgettune.sim.kvcache import BlockPool


class CachingBlockPool(BlockPool):
    """:class:`BlockPool` plus cached blocks. ``used`` counts blocks that live requests hold (a
    shared block once, however many requests hold it); ``free`` blocks include cached ones no
    request holds, which are evicted when the pool hands them out.

    Queries never change state; :meth:`acquire`, :meth:`register` and :meth:`release_keys` are
    how the scheduler tells the pool which keyed blocks a request holds.
    """

    __slots__ = ("_free_queue", "_idle", "_pending", "_ref", "_stamp")

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self._ref: dict[Hashable, int] = {}  # keyed blocks held by live requests
        self._idle: dict[Hashable, int] = {}  # keyed blocks no request holds -> queue stamp
        # Free blocks in the order the pool hands them out: (None, count) for a run of blocks
        # without a key, (key, stamp) for a cached one. An entry whose key was taken back
        # (hit) or evicted is stale and skipped; the never-used blocks come first.
        self._free_queue: deque[tuple[Hashable | None, int]] = deque([(None, capacity)])
        self._stamp = 0
        # Keyed blocks whose content is being computed this iteration and may not be matched
        # until it ends (SGLang's radix tree); :meth:`publish` makes them matchable.
        self._pending: set[Hashable] = set()

    @property
    def cached_blocks(self) -> int:
        """Keyed blocks in the pool: held by a request, or free but not yet evicted."""
        return len(self._ref) + len(self._idle)

    def free_queue_blocks(self) -> int:
        """Blocks the free queue would hand out (equals :attr:`free`; O(queue), for checks)."""
        idle = self._idle
        return sum(
            value if key is None else int(idle.get(key) == value) for key, value in self._free_queue
        )

    def match(self, keys: Sequence[Hashable], max_blocks: int) -> tuple[int, int]:
        """(blocks, of them free) of the longest run of ``keys`` from the first that is cached,
        at most ``max_blocks``. Check only; never changes the pool."""
        ref, idle, pending = self._ref, self._idle, self._pending
        matched = idle_matched = 0
        for key in keys[:max_blocks]:
            if key in pending:
                break
            if key in ref:
                matched += 1
            elif key in idle:
                matched += 1
                idle_matched += 1
            else:
                break
        return matched, idle_matched

    def acquire(self, keys: Sequence[Hashable]) -> None:
        """A request takes the cached blocks ``keys`` (a run :meth:`match` found): free ones
        leave the free queue, so they count as used again."""
        ref, idle = self._ref, self._idle
        for key in keys:
            count = ref.get(key)
            if count is not None:
                ref[key] = count + 1
                continue
            del idle[key]  # its queue entry is now stale
            ref[key] = 1
            self._used += 1

    def register(self, key: Hashable, *, pending: bool = False) -> bool:
        """A request's newly scheduled full block holds ``key``'s content: it becomes a cached
        block that request holds. False (the block stays the request's own) when the key is
        already cached, as vLLM keeps a duplicate uncached. ``pending``: not matchable until
        :meth:`publish` (the iteration computing it has ended)."""
        if key in self._ref or key in self._idle:
            return False
        self._ref[key] = 1
        if pending:
            self._pending.add(key)
        return True

    def publish(self) -> None:
        """The iteration ended: the blocks it computed can be matched from now on."""
        self._pending.clear()

    def allocate(self, blocks: int) -> None:
        """Take ``blocks`` from the head of the free queue, evicting the cached ones taken."""
        super().allocate(blocks)
        queue, idle = self._free_queue, self._idle
        while blocks > 0:
            key, value = queue[0]
            if key is None:
                taken = min(blocks, value)
                blocks -= taken
                if taken == value:
                    queue.popleft()
                else:
                    queue[0] = (None, value - taken)
                continue
            queue.popleft()
            if idle.get(key) == value:  # a live entry: the block is handed out, content lost
                del idle[key]
                blocks -= 1

    def release(self, blocks: int) -> None:
        """Give back ``blocks`` without a key: they join the free queue's tail."""
        super().release(blocks)
        if blocks:
            self._free_queue.append((None, blocks))

    def release_keys(self, keys: Iterable[Hashable]) -> None:
        """A request lets go of its keyed blocks; one no request holds any more stays cached
        at the free queue's tail (give a request's blocks last first, as vLLM frees them, so
        that a prefix's tail is evicted before its head)."""
        ref, idle, pending = self._ref, self._idle, self._pending
        for key in keys:
            count = ref[key] - 1
            if count:
                ref[key] = count
                continue
            del ref[key]
            if key in pending:  # never computed (its request left mid-iteration): not cached
                pending.discard(key)
                self._used -= 1
                self._free_queue.append((None, 1))
                continue
            self._stamp += 1
            idle[key] = self._stamp
            self._free_queue.append((key, self._stamp))
            self._used -= 1
        if len(self._free_queue) > 4 * (self.capacity - self._used) + 64:
            self._compact()

    def _compact(self) -> None:
        """Drop stale entries (a long run of hits leaves many) so the queue stays O(free)."""
        idle = self._idle
        self._free_queue = deque(
            (key, value) for key, value in self._free_queue if key is None or idle.get(key) == value
        )
