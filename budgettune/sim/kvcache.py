"""KV-cache block accounting for the simulated scheduler: capacity from GPU memory, block math.

Capacity in blocks = (GPU memory x gpu_memory_utilization - weight bytes) / (kappa x block_size),
the same budget vLLM hands its block pool (activation memory is ignored).
"""

from __future__ import annotations

from budgettune.core.errors import SpecError
from budgettune.core.hardware import GPU
from budgettune.core.limits import MAX_BLOCK_TOKENS, check_count, check_share
from budgettune.model.stepmodel import StepModel

DEFAULT_BLOCK_SIZE = 16
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold ``tokens`` KV entries (ceiling division)."""
    return -(-tokens // block_size)


def kv_capacity_blocks(
    model: StepModel,
    gpu: GPU,
    *,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    tensor_parallel: int = 1,
) -> int:
    """KV blocks that fit beside the weights on ``tensor_parallel`` GPUs.

    Raises SpecError on field ``gpu_memory_utilization`` when the weights alone do not fit.
    """
    check_share(gpu_memory_utilization, field="gpu_memory_utilization")
    check_count(block_size, field="block_size", maximum=MAX_BLOCK_TOKENS, what="tokens")
    usable_bytes = gpu.memory_bytes * tensor_parallel * gpu_memory_utilization
    free_bytes = usable_bytes - model.weight_bytes
    blocks = int(free_bytes // (model.kv_bytes_per_token * block_size))
    if blocks < 1:
        raise SpecError(
            f"{gpu_memory_utilization} x {tensor_parallel} x "
            f"{gpu.memory_bytes / 1e9:.0f} GB leaves no room for the KV cache beside "
            f"{model.weight_bytes / 1e9:.1f} GB of weights",
            field="gpu_memory_utilization",
            hint="use a larger GPU, more --tensor-parallel-size, or a smaller --dtype",
        )
    return blocks


class BlockPool:
    """KV blocks against a fixed capacity, as a count: no per-block identity is needed because
    the simulator never shares blocks (no prefix caching). The scheduler asks it
    (:meth:`can_allocate`) and tells it (:meth:`allocate`, :meth:`release`); nothing else
    changes the count, so the guards below hold for every allocation."""

    __slots__ = ("_used", "capacity")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._used = 0

    @property
    def used(self) -> int:
        return self._used

    @property
    def free(self) -> int:
        return self.capacity - self._used

    def can_allocate(self, blocks: int) -> bool:
        """Whether ``blocks`` more fit. Check only; never changes the pool."""
        return self._used + blocks <= self.capacity

    def allocate(self, blocks: int) -> None:
        """Take ``blocks``; RuntimeError if they do not fit (a scheduler bug, not user input)."""
        if self._used + blocks > self.capacity:
            raise RuntimeError(f"allocating {blocks} blocks with {self.free} free")
        self._used += blocks

    def release(self, blocks: int) -> None:
        """Give back ``blocks``; RuntimeError if more than are in use."""
        if blocks > self._used:
            raise RuntimeError(f"releasing {blocks} blocks with {self._used} in use")
        self._used -= blocks
