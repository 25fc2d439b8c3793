"""Slots of a parallel sweep: GPU sets of --tensor-parallel-size on vLLM and SGLang, processes
on the built-in engine, pinning only where every client can have a CPU of its own."""

from __future__ import annotations

import pytest

from budgettune.app.slots import Slot, parse_gpus, plan_slots
from budgettune.core.errors import SpecError


def test_gpu_sets_of_the_tensor_parallel_size() -> None:
    plan = plan_slots("vllm", parallel=None, gpus=None, tensor_parallel=2,
                      visible_gpus=[0, 1, 2, 3], cpus=[0, 1])  # fmt: skip
    assert [s.gpus for s in plan.slots] == [(0, 1), (2, 3)]
    assert [s.engine_env() for s in plan.slots] == [
        {"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"},
    ]  # fmt: skip
    assert "clients not pinned: 2 CPU(s)" in plan.how  # 2 CPUs cannot give 2 clients a core each


def test_given_gpus_and_fewer_slots() -> None:
    plan = plan_slots("sglang", parallel=1, gpus=(3, 1), tensor_parallel=1,
                      visible_gpus=[0, 1, 2, 3], cpus=range(8))  # fmt: skip
    assert [s.gpus for s in plan.slots] == [(3,)]
    assert plan.slots[0].client_cpus == ()  # one slot: the sweep's own process, not pinned


def test_enough_cpus_pin_each_client_apart_from_the_engines() -> None:
    plan = plan_slots("vllm", parallel=None, gpus=None, tensor_parallel=1,
                      visible_gpus=[0, 1, 2], cpus=range(8))  # fmt: skip
    assert [s.client_cpus for s in plan.slots] == [(0,), (1,), (2,)]
    assert all(s.engine_cpus == (3, 4, 5, 6, 7) for s in plan.slots)


def test_the_built_in_engine_takes_any_number_of_process_slots() -> None:
    assert plan_slots("sim", parallel=None, gpus=None, tensor_parallel=1,
                      visible_gpus=[], cpus=[0, 1]).slots == (Slot(0),)  # fmt: skip
    plan = plan_slots("sim", parallel=3, gpus=None, tensor_parallel=1, visible_gpus=[],
                      cpus=[0, 1])  # fmt: skip
    assert [s.index for s in plan.slots] == [0, 1, 2] and all(not s.gpus for s in plan.slots)


@pytest.mark.parametrize(
    ("engine", "kwargs", "field", "text"),
    [
        ("vllm", {"parallel": 3, "gpus": None, "tensor_parallel": 2}, "parallel",
         "4 GPU(s) in sets of 2 make 2 slot(s), not 3"),
        ("vllm", {"parallel": None, "gpus": (0, 7), "tensor_parallel": 1}, "gpus",
         "GPU 7 is not among those nvidia-smi lists (0, 1, 2, 3)"),
        ("vllm", {"parallel": None, "gpus": (0,), "tensor_parallel": 2}, "gpus",
         "1 GPU(s) cannot hold one engine of --tensor-parallel-size 2"),
        ("external", {"parallel": 2, "gpus": None, "tensor_parallel": 1}, "parallel",
         "a server you run is one engine at one budget"),
        ("sim", {"parallel": None, "gpus": (0,), "tensor_parallel": 1}, "gpus",
         "applies to vLLM and SGLang"),
        ("sim", {"parallel": 0, "gpus": None, "tensor_parallel": 1}, "parallel", "must be 1"),
    ],
)  # fmt: skip
def test_plans_that_cannot_run_name_the_field(
    engine: str, kwargs: dict, field: str, text: str
) -> None:
    with pytest.raises(SpecError) as caught:
        plan_slots(engine, visible_gpus=[0, 1, 2, 3], cpus=[0, 1], **kwargs)
    assert caught.value.field == field and text in caught.value.message


def test_gpu_lists_are_checked() -> None:
    assert parse_gpus(None) is None and parse_gpus("0,2") == (0, 2)
    for bad in ("0,x", "1,1", "-1"):
        with pytest.raises(SpecError) as caught:
            parse_gpus(bad)
        assert caught.value.field == "gpus"
