"""Vectorised conversion of raw trace fields (bytes) to numbers and timestamps.

Each function converts a whole block with numpy and, only when that fails, walks the block to
name the first bad value with its file line and field.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from budgettune.core.errors import TraceError
from budgettune.trace.schema import FloatArray, IntArray

Fields = Sequence[bytes] | npt.NDArray[np.bytes_]

_TIMESTAMP_HELP = "expected a timestamp like 2023-11-16 18:15:46.6805900 or 2024-05-10T00:00:00Z"


def _show(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return repr(value) if value != "" else "an empty value"


def _as_bytes_array(values: Fields) -> npt.NDArray[np.bytes_]:
    if isinstance(values, np.ndarray):
        return np.ascontiguousarray(values)
    return np.array(values, dtype=np.bytes_) if len(values) else np.empty(0, dtype="S1")


def _plain_digits(raw: npt.NDArray[np.bytes_]) -> IntArray | None:
    """Unsigned decimal integers (digits, then NUL padding) parsed with numpy alone; None when
    any value has another shape (sign, spaces, decimals), left to the general path."""
    n, width = len(raw), raw.dtype.itemsize
    if n == 0 or width > 18:
        return None
    matrix = raw.view(np.uint8).reshape(n, width)
    is_digit = (matrix >= 48) & (matrix <= 57)
    if not (is_digit[:, 0].all() and (is_digit | (matrix == 0)).all()):
        return None
    value = np.zeros(n, dtype=np.int64)
    for j in range(width):  # Horner's rule, one column of digits at a time
        value = np.where(is_digit[:, j], value * 10 + (matrix[:, j].astype(np.int64) - 48), value)
    return value


def parse_int_column(values: Fields, line_numbers: IntArray, *, path: str, field: str) -> IntArray:
    """Whole numbers (``"374"``, also ``"374.0"``); raises TraceError at the first value that is
    not one. Signs are accepted here; range checks happen later with the line numbers."""
    raw = _as_bytes_array(values)
    fast = _plain_digits(raw)
    if fast is not None:
        return fast
    try:
        return raw.astype(np.int64)
    except (ValueError, OverflowError):
        pass
    try:
        floats = raw.astype(np.float64)
    except ValueError:
        floats = None
    if (
        floats is not None
        and np.all(np.isfinite(floats))
        and np.all(floats == np.rint(floats))
        and np.all(np.abs(floats) < 2**62)
    ):
        return floats.astype(np.int64)
    for value, line in zip(raw.tolist(), line_numbers, strict=True):
        try:
            number = float(value)
        except ValueError:
            raise TraceError(
                f"{_show(value.strip())} is not a number", path=path, line=int(line), field=field
            ) from None
        if not math.isfinite(number) or number != int(number):
            raise TraceError(
                f"{_show(value.strip())} is not a whole number of tokens",
                path=path,
                line=int(line),
                field=field,
            )
        if abs(number) >= 2**62:
            raise TraceError(
                f"{_show(value.strip())} is too large", path=path, line=int(line), field=field
            )
    raise AssertionError("unreachable: numpy refused a column every value of which parses")


def parse_float_column(
    values: Fields, line_numbers: IntArray, *, path: str, field: str
) -> FloatArray:
    """Finite decimal numbers; raises TraceError at the first value that is not one."""
    raw = _as_bytes_array(values)
    try:
        out = raw.astype(np.float64)
    except ValueError:
        out = None
    if out is not None:
        bad = np.flatnonzero(~np.isfinite(out))
        if not len(bad):
            return out
        i = int(bad[0])
        raise TraceError(
            f"{_show(raw[i].strip())} is not a finite number",
            path=path,
            line=int(line_numbers[i]),
            field=field,
        )
    for value, line in zip(raw.tolist(), line_numbers, strict=True):
        try:
            float(value)
        except ValueError:
            raise TraceError(
                f"{_show(value.strip())} is not a number", path=path, line=int(line), field=field
            ) from None
    raise AssertionError("unreachable: numpy refused a column every value of which parses")


def looks_like_datetime(value: bytes) -> bool:
    """True for values shaped like ``YYYY-MM-DD...`` (a wall-clock timestamp, not seconds)."""
    value = value.strip()
    return len(value) >= 10 and value[4:5] == b"-" and value[7:8] == b"-" and value[:4].isdigit()


def _days_from_civil(year: IntArray, month: IntArray, day: IntArray) -> IntArray:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm), vectorised."""
    year = year - (month <= 2)
    era = year // 400
    yoe = year - era * 400
    doy = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_DIGIT_COLUMNS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]


def parse_datetime_ns(values: Fields, line_numbers: IntArray, *, path: str, field: str) -> IntArray:
    """``YYYY-MM-DD[ T]HH:MM:SS[.fraction][Z|+HH:MM]`` to int64 nanoseconds since the epoch (UTC
    when an offset is given, else the naive wall clock). Fractions keep up to 9 digits (Azure
    2023 has 7). Raises TraceError at the first value of another shape."""
    n = len(values)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    raw = np.strings.strip(_as_bytes_array(values))
    width = max(raw.dtype.itemsize, 19)
    # pad with NULs so that every index below stays inside the matrix
    mat = np.zeros((n, width + 8), dtype=np.uint8)
    mat[:, : raw.dtype.itemsize] = raw.view(np.uint8).reshape(n, raw.dtype.itemsize)
    digits = mat[:, _DIGIT_COLUMNS].astype(np.int64) - 48
    ok = ((digits >= 0) & (digits <= 9)).all(axis=1)
    ok &= (mat[:, 4] == ord("-")) & (mat[:, 7] == ord("-"))
    ok &= (mat[:, 10] == ord(" ")) | (mat[:, 10] == ord("T"))
    ok &= (mat[:, 13] == ord(":")) & (mat[:, 16] == ord(":"))
    d = digits
    year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    month = d[:, 4] * 10 + d[:, 5]
    day = d[:, 6] * 10 + d[:, 7]
    hour = d[:, 8] * 10 + d[:, 9]
    minute = d[:, 10] * 10 + d[:, 11]
    second = d[:, 12] * 10 + d[:, 13]
    ok &= (month >= 1) & (month <= 12) & (day >= 1) & (day <= 31)
    ok &= (hour < 24) & (minute < 60) & (second < 61)
    # the fraction: a '.' then a run of digits, each worth 10^-k s (past the 9th ignored)
    rows = np.arange(n)
    has_dot = mat[:, 19] == ord(".")
    tail_cols = mat[:, 20 : max(width + 1, 21)]  # at least one NUL column ends each run
    is_digit = (tail_cols >= 48) & (tail_cols <= 57)
    run = np.where(is_digit.all(axis=1), is_digit.shape[1], is_digit.argmin(axis=1))
    run = np.where(has_dot, run, 0)
    kept = np.minimum(run, 9)
    frac_ns = np.zeros(n, dtype=np.int64)
    for k in range(min(9, is_digit.shape[1])):  # Horner over the kept digits, then scale
        take = k < kept
        frac_ns = np.where(take, frac_ns * 10 + (tail_cols[:, k].astype(np.int64) - 48), frac_ns)
    frac_ns *= 10 ** (9 - kept)
    end = np.where(has_dot, 20 + run, 19)
    ok &= ~has_dot | (end > 20)
    # the zone: nothing, 'Z', or +HH:MM / -HH:MM
    tail = mat[rows, end]
    offset_s = np.zeros(n, dtype=np.int64)
    if tail.any():  # naive timestamps (Azure 2023) skip all of this
        signed = (tail == ord("+")) | (tail == ord("-"))
        is_z = tail == ord("Z")
        zone = mat[rows[:, None], end[:, None] + np.arange(1, 7)].astype(np.int64)
        zone_digits = zone[:, [0, 1, 3, 4]] - 48
        zone_ok = ((zone_digits >= 0) & (zone_digits <= 9)).all(axis=1)
        zone_ok &= (zone[:, 2] == ord(":")) & (zone[:, 5] == 0)
        offset = (zone_digits[:, 0] * 10 + zone_digits[:, 1]) * 3600 + (
            zone_digits[:, 2] * 10 + zone_digits[:, 3]
        ) * 60
        offset_s = np.where(signed, np.where(tail == ord("-"), -offset, offset), 0)
        ok &= np.where(signed, zone_ok, True)
        ok &= np.where(is_z, mat[rows, end + 1] == 0, True)
        ok &= signed | is_z | (tail == 0)
    bad = np.flatnonzero(~ok)
    if len(bad):
        i = int(bad[0])
        raise TraceError(
            f"cannot read {_show(raw[i])} as a timestamp; {_TIMESTAMP_HELP}",
            path=path,
            line=int(line_numbers[i]),
            field=field,
        )
    days = _days_from_civil(year, month, day)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_s
    return seconds * 1_000_000_000 + frac_ns


class TimeColumn:
    """Converts an arrival column block by block to seconds relative to the first value seen.

    The kind (wall-clock timestamps or plain numbers) is decided on the first value; numbers are
    multiplied by ``unit_s`` (1 for seconds, 0.001 for milliseconds).
    """

    def __init__(self, *, path: str, field: str, unit_s: float = 1.0) -> None:
        self.path = path
        self.field = field
        self.unit_s = unit_s
        self.is_datetime: bool | None = None
        self._origin_ns: int | None = None

    def convert(self, values: Fields, line_numbers: IntArray) -> FloatArray:
        if not len(values):
            return np.empty(0)
        if self.is_datetime is None:
            self.is_datetime = looks_like_datetime(values[0])
        if self.is_datetime:
            ns = parse_datetime_ns(values, line_numbers, path=self.path, field=self.field)
            if self._origin_ns is None:
                self._origin_ns = int(ns[0])
            # relative first, then float: keeps 100 ns resolution over weeks of trace
            return (ns - self._origin_ns).astype(np.float64) / 1e9
        seconds = parse_float_column(values, line_numbers, path=self.path, field=self.field)
        return seconds * self.unit_s if self.unit_s != 1.0 else seconds
