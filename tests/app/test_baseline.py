"""`sweep --baseline`, parsed once: auto, none or a number of tokens, in any case and spacing,
and what the verdict and the sweep's lines call each."""

from __future__ import annotations

import pytest

from budgettune.app.baseline import Baseline
from budgettune.core.engine_defaults import DefaultBudget
from budgettune.core.errors import SpecError

DEFAULTS = DefaultBudget(budget_tokens=2048, rule="asked vLLM 0.32.0", max_num_seqs=128)


@pytest.mark.parametrize("text", ["auto", " AUTO ", "Auto"])
def test_auto_is_the_engines_default(text: str) -> None:
    baseline = Baseline.parse(text)
    assert baseline.is_auto and baseline.budget(DEFAULTS) == 2048
    assert baseline.budget(None) is None  # not known: nothing to compare with
    assert baseline.label == "Your engine default"
    assert baseline.line(DEFAULTS) == "engine default budget 2048 (asked vLLM 0.32.0)"


def test_none_compares_with_nothing() -> None:
    baseline = Baseline.parse(" None")
    assert baseline.is_none and baseline.budget(DEFAULTS) is None
    assert baseline.line(DEFAULTS) == "no reference budget (--baseline none)"


def test_a_number_is_the_budget_run_today() -> None:
    baseline = Baseline.parse("4096")
    assert baseline.tokens == 4096 and baseline.budget(DEFAULTS) == 4096
    assert baseline.label == "Your current budget"
    assert baseline.line(None) == "reference budget 4096 (--baseline)"


@pytest.mark.parametrize("text", ["", "auto2", "4k", "-5", "0", "1e9"])
def test_anything_else_is_refused_naming_the_option(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        Baseline.parse(text)
    assert caught.value.field == "baseline"
