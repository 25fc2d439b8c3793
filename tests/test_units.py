"""Unit parsing: durations, token counts, lists; each error names the option and the value."""

from __future__ import annotations

import re

import pytest

from budgettune.core.errors import SpecError
from budgettune.core.units import format_ms, parse_duration_s, parse_int_list, parse_tokens


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("50ms", 0.05),
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("2m", 120.0),
        ("250us", 250e-6),
        (" 16 ms ", 0.016),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "hint"), [("50", "50ms or 50s"), ("1.5", "1.5ms or 1.5s")])
def test_a_bare_number_is_refused_with_both_readings(text: str, hint: str) -> None:
    """'--slo-tbt 50' could be 50 ms or 50 s: the unit is required, never guessed."""
    with pytest.raises(SpecError, match=f"has no unit; write {hint}"):
        parse_duration_s(text, field="slo_tbt")


@pytest.mark.parametrize("text", ["1e400s", "169h", "1e9h"])
def test_a_duration_past_a_week_is_refused_as_too_long(text: str) -> None:
    with pytest.raises(SpecError, match="longer than budgettune takes"):
        parse_duration_s(text, field="slo_ttft")


@pytest.mark.parametrize("text", ["50mss", "fast", "-5ms", "0s", ""])
def test_bad_durations_name_option_and_value(text: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_duration_s(text, field="--slo-tbt")
    assert "--slo-tbt" in str(info.value) and repr(text) in str(info.value)


def test_tokens_and_lists() -> None:
    assert parse_tokens("512") == 512
    assert parse_tokens("8k") == 8000
    # Upper case is binary, as vLLM reads --max-num-batched-tokens 8K (8192).
    assert parse_tokens("8K") == 8192
    assert parse_tokens("1M") == 1_048_576 and parse_tokens("1m") == 1_000_000
    assert parse_tokens("25.6k") == 25_600
    with pytest.raises(SpecError, match="no decimals with the binary suffix K"):
        parse_tokens("1.5K", field="--budgets")
    assert parse_int_list("128, 256,512", field="--chunk-sizes") == [128, 256, 512]
    with pytest.raises(SpecError, match="--chunk-sizes"):
        parse_int_list("128,abc", field="--chunk-sizes")
    with pytest.raises(SpecError, match="positive"):
        parse_int_list("0", field="--budgets")


def test_format_ms_is_the_one_duration_format() -> None:
    assert format_ms(31.24) == "31.2 ms"
    assert format_ms(500.4) == "500 ms"
    assert format_ms(1000.0) == "1.00 s" and format_ms(1534.0) == "1.53 s"
    assert format_ms(12_000.0) == "12.0 s" and format_ms(123_456.0) == "123 s"
    assert format_ms(float("inf")) == "inf (failures)"
    assert format_ms(None) == format_ms(float("nan")) == "-"
    assert format_ms(None, missing="failed requests") == "failed requests"
    # a table cell under an "ms" header: the same digits, no unit, milliseconds throughout
    assert format_ms(31.24, unit=False) == "31.2"
    assert format_ms(1534.0, unit=False) == "1,534"
    assert format_ms(float("inf"), unit=False) == "inf"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("256,,512", "value 2 of 3 is empty (in '256,,512')"),
        ("256,512,", "value 3 of 3 is empty"),
        ("1_6", "'1_6' is not a whole number"),  # Python's int() reads 16
        ("--5", "'--5' is not a whole number"),
        ("+3", "'+3' is not a whole number"),
        ("\uff11\uff12", "is not a whole number"),  # full-width digits: int() reads 12
    ],
)
def test_a_list_takes_only_plain_whole_numbers(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_int_list(text, field="budgets")


def test_simulate_budgets_take_no_empty_value_and_at_most_256() -> None:
    from budgettune.app.simulate import parse_budgets

    assert parse_budgets("256, none,8k") == [256, None, 8000]
    with pytest.raises(SpecError, match=re.escape("value 2 of 3 is empty")):
        parse_budgets("256,,512")
    with pytest.raises(SpecError, match="more than 256 values"):  # sweep refuses them too
        parse_budgets(",".join(["512"] * 257))


def test_parallel_slots_are_capped_at_the_most_candidates_a_sweep_has() -> None:
    from budgettune.app.slots import plan_slots

    with pytest.raises(SpecError, match=re.escape("100,000 is more than budgettune takes")):
        plan_slots("sim", parallel=100_000, gpus=None, tensor_parallel=1, visible_gpus=())
