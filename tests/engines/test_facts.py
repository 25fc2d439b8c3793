"""The run record names who set each scheduling setting of a launch: budgettune only the budget
under test and prefix caching off; the user each option given; the engine everything else."""

from __future__ import annotations

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
    assert found["prefix_caching"] == "the user: --prefix-caching on"
    off = decided(LaunchSpec(chunked_prefill=False))["budget_tokens"]
    assert str(off).startswith("budgettune: chunking off")
