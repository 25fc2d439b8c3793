"""Parsing and formatting of human units: durations ("50ms", "1s"), token counts ("2k"), lists.

Every parser raises :class:`~budgettune.core.errors.SpecError` naming the field and the bad value.
"""

from __future__ import annotations

import math
import re

from budgettune.core.errors import SpecError, shorten
from budgettune.core.limits import MAX_DURATION_S, MAX_TOKENS

_DURATION_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(us|µs|ms|s|m|min|h)?\s*$")
_DURATION_SCALE_S = {
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
}


def parse_duration_s(text: str, *, field: str = "duration", allow_zero: bool = False) -> float:
    """Parse "50ms", "1s", "1.5s", "2m", "1h" into seconds: positive (or zero, with
    ``allow_zero``: "0", "0s"), at most MAX_DURATION_S (a week). The unit is required: a bare
    "50" could be 50 ms or 50 s, so it is refused with both readings as the hint; a bare zero
    reads the same in every unit."""
    match = _DURATION_RE.match(str(text))
    if not match:
        raise SpecError(
            f"cannot read {_short(repr(text))} as a duration; write e.g. 50ms, 1s, 2m", field=field
        )
    value = float(match.group(1))
    unit = match.group(2)
    if allow_zero and value == 0:
        return 0.0
    if unit is None:
        raise SpecError(
            f"{text.strip()!r} has no unit; write {match.group(1)}ms or {match.group(1)}s",
            field=field,
        )
    seconds = value * _DURATION_SCALE_S[unit]
    if seconds <= 0:
        raise SpecError(f"duration must be positive, got {text!r}", field=field)
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise SpecError(
            f"{_short(repr(text))} is longer than budgettune takes (at most "
            f"{MAX_DURATION_S / 86_400:g} days)",
            field=field,
        )
    return seconds


def _short(text: object) -> str:
    return shorten(text)


_TOKENS_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kKmM]?)\s*$")
_DECIMAL_SCALE = {"": 1, "k": 1000, "m": 1_000_000}
_BINARY_SCALE = {"K": 1024, "M": 1024 * 1024}


def parse_tokens(text: str, *, field: str = "tokens", maximum: int = MAX_TOKENS) -> int:
    """Parse "512", "8k", "8K" into a whole number of tokens, as vLLM reads its own flags
    (``human_readable_int``): lower case is decimal ("8k" is 8000, "1m" a million), upper case
    binary ("8K" is 8192, "1M" is 1,048,576), so ``--budgets 8K`` means the budget vLLM's
    ``--max-num-batched-tokens 8K`` would. At most ``maximum`` (MAX_TOKENS)."""
    match = _TOKENS_RE.match(str(text))
    if not match:
        raise SpecError(
            f"cannot read {_short(repr(text))} as a token count; write e.g. 512 or 8K", field=field
        )
    number, suffix = match.groups()
    if suffix in _BINARY_SCALE and "." in number:
        raise SpecError(
            f"{text!r}: no decimals with the binary suffix {suffix} "
            f"(did you mean {number}{suffix.lower()}?)",
            field=field,
        )
    scale = _BINARY_SCALE.get(suffix) or _DECIMAL_SCALE[suffix]
    value = float(number) * scale
    if not math.isfinite(value) or value > maximum:
        raise SpecError(
            f"{_short(repr(text))} is more tokens than budgettune takes (at most {maximum:,})",
            field=field,
        )
    if value != int(value):
        raise SpecError(f"{text!r} is not a whole number of tokens", field=field)
    return int(value)


def parse_positive_float(
    text: str | float, *, field: str, maximum: float | None = None, minimum: float | None = None
) -> float:
    """Parse a strictly positive finite number (in [``minimum``, ``maximum``]), naming
    ``field``."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise SpecError(f"expected a number, got {_short(repr(text))}", field=field) from None
    if not math.isfinite(value) or value <= 0:
        raise SpecError(f"must be a positive number, got {_short(repr(text))}", field=field)
    if maximum is not None and value > maximum:
        raise SpecError(
            f"{value:g} is more than budgettune takes (at most {maximum:g})", field=field
        )
    if minimum is not None and value < minimum:
        raise SpecError(
            f"{value:g} is less than budgettune takes (at least {minimum:.3g})", field=field
        )
    return value


MAX_LIST_ITEMS = 256  # values in one comma-separated list (--budgets, --chunk-sizes, ...)


def list_items(text: str, *, field: str) -> list[str]:
    """The values of a comma-separated list, stripped: at most MAX_LIST_ITEMS, none of them
    empty; [] for a blank text (each caller says what an empty list means to it)."""
    if not str(text).strip():
        return []
    parts = [part.strip() for part in str(text).split(",")]
    if len(parts) > MAX_LIST_ITEMS:
        raise SpecError(f"more than {MAX_LIST_ITEMS} values", field=field)
    for position, part in enumerate(parts, start=1):
        if not part:  # "256,,512" or a trailing comma: a value lost in typing, not skipped
            raise SpecError(
                f"value {position} of {len(parts)} is empty (in {_short(repr(text))})", field=field
            )
    return parts


def parse_int_list(text: str, *, field: str, maximum: int = MAX_TOKENS) -> list[int]:
    """Parse "128,256,512" into ints, each in [1, ``maximum``], at most MAX_LIST_ITEMS."""
    out: list[int] = []
    for part in list_items(text, field=field):
        # digits only: Python's int() also reads "1_6" as 16 and " +3" as 3
        if re.fullmatch(r"-?[0-9]+", part) is None:
            raise SpecError(
                f"{_short(repr(part))} is not a whole number (in {_short(repr(text))})", field=field
            )
        value = int(part)
        if value <= 0:
            raise SpecError(f"values must be positive, got {value} (in {text!r})", field=field)
        if value > maximum:
            raise SpecError(
                f"{value:,} is more than budgettune takes (at most {maximum:,})", field=field
            )
        out.append(value)
    if not out:
        raise SpecError(f"empty list {text!r}", field=field)
    return out


def format_ms(value_ms: float | None, *, missing: str = "-", unit: bool = True) -> str:
    """A duration in milliseconds as budgettune shows it everywhere (console tables, verdicts,
    report pages): one decimal below 100 ms ("31.2 ms"), whole milliseconds to 1 s ("512 ms"),
    then seconds to three figures ("1.53 s", "12.3 s", as TTFT targets are written).
    ``unit=False``: the bare number for a cell under an "ms" header ("31.2", "1,530"). ``missing``
    where there is no figure (None, nan); +inf is a failed request's ("inf (failures)")."""
    if value_ms is None or math.isnan(value_ms):
        return missing
    if math.isinf(value_ms):
        return "inf (failures)" if unit else "inf"
    if unit and abs(value_ms) >= 1000:
        seconds = value_ms / 1e3
        decimals = 2 if abs(seconds) < 10 else 1 if abs(seconds) < 100 else 0
        return f"{seconds:,.{decimals}f} s"
    digits = f"{value_ms:,.0f}" if abs(value_ms) >= 100 else f"{value_ms:.1f}"
    return f"{digits} ms" if unit else digits


def finite_or_none(value: float | None, *, digits: int | None = None) -> float | None:
    """``value`` (rounded to ``digits`` when given) when it is a finite number, else None: JSON
    holds no inf or nan, and a missing figure reads as null in every document budgettune writes."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits) if digits is not None else float(value)


def ms_or_none(seconds: float | None) -> float | None:
    """Seconds to milliseconds for a document, None when not finite (see :func:`finite_or_none`)."""
    return None if seconds is None else finite_or_none(seconds * 1e3)
