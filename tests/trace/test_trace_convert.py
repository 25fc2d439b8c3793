"""The vectorised field converters against Python's own parsers."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budgettune.core.errors import TraceError
from budgettune.trace.convert import parse_datetime_ns, parse_float_column, parse_int_column

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def reference_ns(moment: dt.datetime) -> int:
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


@settings(max_examples=200, deadline=None)
@given(
    moment=st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 12, 31)),
    digits=st.integers(min_value=0, max_value=7),
    separator=st.sampled_from([" ", "T"]),
    offset_minutes=st.one_of(st.none(), st.integers(min_value=-14 * 60, max_value=14 * 60)),
)
def test_datetime_matches_python(
    moment: dt.datetime, digits: int, separator: str, offset_minutes: int | None
) -> None:
    fraction = f"{moment.microsecond:06d}0"[:digits]
    text = moment.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + (f".{fraction}" if digits else "")
    kept_us = int((fraction + "0000000")[:6]) if digits else 0
    moment = moment.replace(microsecond=kept_us)
    zone = dt.UTC
    if offset_minutes is not None:
        sign = "+" if offset_minutes >= 0 else "-"
        hours, minutes = divmod(abs(offset_minutes), 60)
        text += f"{sign}{hours:02d}:{minutes:02d}"
        zone = dt.timezone(dt.timedelta(minutes=offset_minutes))
    got = parse_datetime_ns([text.encode()], np.array([7]), path="f", field="t")
    assert int(got[0]) == reference_ns(moment.replace(tzinfo=zone))


def test_seven_fraction_digits_keep_100ns() -> None:
    got = parse_datetime_ns(
        [b"2023-11-16 18:15:46.6805901", b"2023-11-16 18:15:46.6805900"],
        np.array([2, 3]),
        path="f",
        field="t",
    )
    assert int(got[0] - got[1]) == 100


def test_int_column_accepts_integral_floats_and_spaces() -> None:
    lines = np.array([2, 3, 4])
    assert parse_int_column([b"12", b" 7", b"3.0"], lines, path="f", field="n").tolist() == [
        12,
        7,
        3,
    ]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([b"1", b"", b"2"], "f:3: field 'n': an empty value is not a number"),
        ([b"1", b"2", b"2.5"], "f:4: field 'n': '2.5' is not a whole number of tokens"),
        ([b"1", b"inf", b"2"], "f:3: field 'n': 'inf' is not a whole number of tokens"),
    ],
)
def test_int_column_errors_name_the_line(values: list[bytes], message: str) -> None:
    with pytest.raises(TraceError) as error:
        parse_int_column(values, np.array([2, 3, 4]), path="f", field="n")
    assert str(error.value) == message


def test_float_column_refuses_non_finite() -> None:
    lines = np.array([5, 6])
    assert parse_float_column([b"1.5", b"2e3"], lines, path="f", field="x").tolist() == [
        1.5,
        2000.0,
    ]
    with pytest.raises(TraceError, match="f:6: field 'x': 'nan' is not a finite number"):
        parse_float_column([b"1", b"nan"], lines, path="f", field="x")
