"""What an engine refuses, refused before anything starts, in the engine's own words: vLLM (and
the built-in engine, which follows it) takes no budget below a max-num-seqs the user gave; no
engine splits a model over a GPU count that does not divide its attention heads. A searched
budget list leaves out what the engine refuses, and the two-knob grid never launches such a
pair (tests/tune/test_pair_search.py)."""

from __future__ import annotations

import pytest

from budgettune.app.launch import budgets_taken, check_budgets_hold_seqs, refused_pairs
from budgettune.core.errors import SpecError
from budgettune.core.hardware import check_split, resolve_model

VLLM_WORDS = "'max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512)'"


@pytest.mark.parametrize("engine", ["vllm", "sim"])
def test_a_budget_below_a_given_max_num_seqs_is_refused_with_vllms_rule(engine: str) -> None:
    with pytest.raises(SpecError, match=VLLM_WORDS.replace("(", r"\(").replace(")", r"\)")):
        check_budgets_hold_seqs(engine, [256, 1024], 512, field="budgets")
    check_budgets_hold_seqs(engine, [512, 1024], 512, field="budgets")  # equal is taken
    check_budgets_hold_seqs(engine, [256], None, field="budgets")  # not given: vLLM cuts it


def test_engines_without_the_rule_take_any_pair() -> None:
    check_budgets_hold_seqs("sglang", [64], 512, field="budgets")  # SGLang has no such rule
    assert refused_pairs("sglang", (64, 128), (16, 512)) == frozenset()


def test_searched_budgets_leave_out_what_the_engine_refuses() -> None:
    assert budgets_taken("vllm", (256, 512, 768), 512, 256) == (512, 768)
    assert budgets_taken("vllm", (256, 512), 1000, 256) == (1024,)  # none left: the first above
    assert budgets_taken("vllm", (256, 512), None, 256) == (256, 512)
    assert refused_pairs("vllm", (256, 512, 2048), (64, 1024)) == {(0, 1), (1, 1)}


def test_a_split_that_does_not_divide_the_heads_is_refused() -> None:
    shape = resolve_model("llama-3.1-8b")
    with pytest.raises(SpecError, match=r"heads \(32\) must be divisible by tensor parallel size"):
        check_split(shape, 3, field="tensor_parallel_size")
    check_split(shape, 8, field="tensor_parallel_size")
