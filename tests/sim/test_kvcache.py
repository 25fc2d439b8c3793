"""KV capacity from GPU memory and block arithmetic."""

from __future__ import annotations

import pytest

from budgettune.core.errors import SpecError
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.stepmodel import StepModel
from budgettune.sim.kvcache import BlockPool, blocks_for, kv_capacity_blocks


def test_blocks_for() -> None:
    assert [blocks_for(t, 16) for t in (0, 1, 16, 17, 32, 33)] == [0, 1, 1, 2, 2, 3]


def test_capacity_llama_8b_on_h100() -> None:
    gpu = resolve_gpu("h100-sxm")
    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), gpu)
    # (0.9 x 80e9 - 2 x 8,030,261,248) bytes / (131,072 x 16 bytes per block) = 26,674.02
    assert kv_capacity_blocks(model, gpu) == 26_674
    # Half the blocks' tokens per block: twice the blocks (floor of 53,348.04).
    assert kv_capacity_blocks(model, gpu, block_size=8) == 53_348
    # Two GPUs: (0.9 x 160e9 - 16,060,522,496) / 2,097,152 = 61,006.3
    assert kv_capacity_blocks(model, gpu, tensor_parallel=2) == 61_006


def test_capacity_errors() -> None:
    gpu = resolve_gpu("a100-40g")
    model = StepModel.from_hardware(resolve_model("llama-3.1-70b"), gpu)  # 141 GB of weights
    with pytest.raises(SpecError, match="leaves no room") as caught:
        kv_capacity_blocks(model, gpu)
    assert caught.value.field == "gpu_memory_utilization"
    with pytest.raises(SpecError, match=r"must be in \(0, 1\]") as caught:
        kv_capacity_blocks(model, gpu, gpu_memory_utilization=1.5)
    assert caught.value.field == "gpu_memory_utilization"


def test_block_pool() -> None:
    pool = BlockPool(10)
    assert pool.can_allocate(10) and not pool.can_allocate(11)
    pool.allocate(7)
    assert pool.free == 3 and pool.used == 7
    with pytest.raises(RuntimeError):
        pool.allocate(4)
    pool.release(7)
    with pytest.raises(RuntimeError):
        pool.release(1)
    # The count changes only through allocate/release, so their guards see every change.
    with pytest.raises(AttributeError):
        pool.used = 3  # type: ignore[misc]
