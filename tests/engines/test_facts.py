"""The run record names who set each scheduling setting of a launch: budgettune only the budget
under test; the user each option given; the engine everything else, prefix caching included
(passed as the engine's default, with its source)."""

from __future__ import annotations

import pytest

from budgettune.app.launch import launch_spec
from budgettune.app.requests import LaunchRequest
from budgettune.engines.base import EngineHandle, LaunchSpec
from budgettune.engines.facts import EngineFacts


def decided(spec: LaunchSpec) -> dict[str, object]:
    handle = EngineHandle(engine="vllm", url="http://127.0.0.1:1", model="m", version="0.32.0")
    record = EngineFacts.of(handle, spec).to_json()
    found = record["decided_by"]
    assert isinstance(found, dict)
    return found


def test_only_the_budget_and_prefix_caching_are_budgettunes() -> None:
    found = decided(LaunchSpec(budget_tokens=1024, model="m"))
    assert found["budget_tokens"] == "budgettune: the budget under test"
    assert str(found["prefix_caching"]).startswith("budgettune: off")
    for name in ("max_num_seqs", "max_model_len", "tensor_parallel_size", "dtype"):
        assert found[name] == "the engine's default", name


def test_what_the_user_gave_is_theirs() -> None:
    found = decided(
        LaunchSpec(budget_tokens=None, max_num_seqs=96, dtype="float32", prefix_caching=True)
    )
    assert found["budget_tokens"] == "the engine's default"
    assert found["max_num_seqs"] == "the user: --max-num-seqs"
    assert found["dtype"] == "the user: --dtype"
    off = decided(LaunchSpec(chunked_prefill=False))["budget_tokens"]
    assert str(off).startswith("budgettune: chunking off")


@pytest.mark.parametrize(
    ("engine", "asked", "on", "said"),
    [
        ("vllm", "engine", True, "the engine's default, on: vLLM V1 caches prefixes by default"),
        ("sglang", "engine", True, "the engine's default, on: SGLang keeps its radix cache"),
        ("trtllm", "engine", True, "the engine's default, on: TensorRT-LLM reuses KV blocks"),
        ("sim", "engine", True, "the engine's default, on: the built-in engine follows vLLM"),
        ("vllm", "off", False, "the user: --prefix-caching off"),
        ("sim", "ON", True, "the user: --prefix-caching on"),
    ],
)
def test_prefix_caching_is_the_engines_unless_the_user_says(
    engine: str, asked: str, on: bool, said: str
) -> None:
    spec = launch_spec(
        LaunchRequest(prefix_caching=asked), engine=engine, model="m" if engine != "sim" else None,
        gpu=None, url=None, max_model_len_tokens=None,
    )  # fmt: skip
    assert spec.prefix_caching is on
    assert str(decided(spec)["prefix_caching"]).startswith(said)
