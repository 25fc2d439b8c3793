"""Load a trace file of any known format into a validated :class:`Trace` and a :class:`LoadReport`.

Checks common to every format live here: positive lengths, shared prefixes within the prompt,
timestamps in order (sorted with a warning, or refused with ``strict``), --max-model-len.
Nothing is printed: warnings go to ``on_warning`` and into the report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from budgettune.core.errors import SpecError, TraceError
from budgettune.core.limits import MAX_TOKENS
from budgettune.trace.blocks import spool
from budgettune.trace.formats import detect_format, get_format
from budgettune.trace.schema import IntArray, LoadReport, RawRows, Trace, plural

ON_LONG = ("clip", "drop", "error")

Warn = Callable[[str], None]


def load_trace(
    path: str | Path,
    *,
    format: str | None = None,
    columns: str | None = None,
    max_model_len: int | None = None,
    on_long: str = "error",
    strict: bool = False,
    on_warning: Warn | None = None,
) -> tuple[Trace, LoadReport]:
    """Read ``path`` (format detected from content unless ``format`` names one; ``columns``
    implies the plain ``csv`` format).

    Requests with prompt + output above ``max_model_len`` are clipped (see
    :func:`clip_to_context`), dropped, or refused (``on_long``).
    Raises TraceError (file:line, field) for bad content, SpecError for bad option values.
    """
    name = str(path)
    spooled = spool(path)  # a pipe or FIFO is read once, here
    try:
        return _load(spooled.path, name, format, columns, max_model_len, on_long, strict,
                     on_warning)  # fmt: skip
    finally:
        spooled.close()


def file_sha256(path: str) -> str | None:
    """Hex SHA-256 of a trace's bytes (as stored: a .gz file's compressed bytes), None when it
    cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(getattr(path, "source", path), "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _load(
    name: str,
    shown: str,
    format: str | None,
    columns: str | None,
    max_model_len: int | None,
    on_long: str,
    strict: bool,
    on_warning: Warn | None,
) -> tuple[Trace, LoadReport]:
    if on_long not in ON_LONG:
        raise SpecError(
            f"unknown value {on_long!r}; use one of {', '.join(ON_LONG)}", field="on_long"
        )
    if max_model_len is not None and max_model_len < 2:
        raise SpecError(f"must be at least 2 tokens, got {max_model_len}", field="max_model_len")
    if columns is not None and format is not None and format.strip().lower() != "csv":
        raise SpecError(f"applies to --format csv only, not --format {format}", field="columns")
    fmt = get_format(format or ("csv" if columns is not None else detect_format(name)))
    rows = fmt.read(name, columns)
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message)
        if on_warning is not None:
            on_warning(message)

    for reason, count in rows.skipped:
        if count:
            warn(f"{name}: skipped {plural(count, 'row')} with {reason}")
    zero_output = rows.output == 0
    if zero_output.any():
        # nothing to decode: such a request cannot be replayed with its length
        count = int(zero_output.sum())
        rows.skipped.append(("zero output tokens", count))
        first = rows.where(int(np.argmax(zero_output)), rows.output_field)
        warn(f"{name}: skipped {plural(count, 'row')} with zero output tokens (first at {first})")
        rows.keep(~zero_output)
    if len(rows.prompt) == 0:
        skipped = sum(count for _, count in rows.skipped)
        raise TraceError(
            f"no requests left after skipping {skipped:,} rows" if skipped else "no requests",
            path=name,
        )
    _check_lengths(rows, name)
    clipped, dropped = _apply_max_model_len(rows, name, max_model_len, on_long)
    out_of_order = _order(rows, name, strict, warn)
    trace = Trace(
        prompt_tokens=rows.prompt,
        output_tokens=rows.output,
        arrival_s=rows.arrival_s,
        prefix_group=rows.prefix_group,
        prefix_tokens=rows.prefix_tokens,
        source=shown,
        format=fmt.name,
        shared_blocks=rows.shared_blocks,
    )
    report = LoadReport(
        path=shown,
        format=fmt.name,
        requests=len(trace),
        skipped=tuple((reason, count) for reason, count in rows.skipped if count),
        out_of_order=out_of_order,
        clipped=clipped,
        dropped=dropped,
        max_model_len=max_model_len,
        warnings=tuple(warnings),
        sha256=file_sha256(name),
    )
    return trace, report


def _check_lengths(rows: RawRows, path: str) -> None:
    """Lengths in [1, MAX_TOKENS] (outputs of 0 were skipped before); shared prefix within the
    prompt."""
    for values, field in ((rows.prompt, rows.prompt_field), (rows.output, rows.output_field)):
        bad = np.flatnonzero(values < 1)
        if len(bad):
            i = int(bad[0])
            what = "negative" if values[i] < 0 else "zero"
            raise rows.where(i, field).error(
                f"token count must be at least 1, got {int(values[i])} ({what})", path
            )
        bad = np.flatnonzero(values > MAX_TOKENS)
        if len(bad):
            i = int(bad[0])
            raise rows.where(i, field).error(
                f"{int(values[i]):,} tokens is more than budgettune takes (at most {MAX_TOKENS:,})",
                path,
            )
    if rows.prefix_group is not None and rows.prefix_tokens is not None:
        group, tokens = rows.prefix_group, rows.prefix_tokens
        checks = (
            (group < -1, "prefix_group", "must be -1 (none) or a group number >= 0"),
            (tokens < 0, "prefix_tokens", "must not be negative"),
            ((group < 0) & (tokens > 0), "prefix_tokens", "is set but prefix_group is -1"),
            (tokens > rows.prompt, "prefix_tokens", "exceeds the prompt's length"),
        )
        for mask, field, message in checks:
            bad = np.flatnonzero(mask)
            if len(bad):
                i = int(bad[0])
                got = int(group[i] if field == "prefix_group" else tokens[i])
                raise rows.where(i, field).error(f"{message} (got {got})", path)


def _apply_max_model_len(
    rows: RawRows, path: str, max_model_len: int | None, on_long: str
) -> tuple[int, int]:
    """Clip, drop or refuse requests whose prompt + output exceed the context.
    Returns (clipped, dropped)."""
    if max_model_len is None:
        return 0, 0
    too_long = rows.prompt + rows.output > max_model_len
    count = int(too_long.sum())
    if not count:
        return 0, 0
    if on_long == "error":
        i = int(np.argmax(too_long))
        raise rows.where(i, rows.prompt_field).error(
            f"prompt {int(rows.prompt[i])} + output {int(rows.output[i])} tokens exceed "
            f"max_model_len {max_model_len} ({count:,} such requests)",
            path,
            hint="pass --on-long clip or --on-long drop, or a larger --max-model-len",
        )
    if on_long == "drop":
        rows.keep(~too_long)
        if len(rows.prompt) == 0:
            raise TraceError(
                f"every request exceeds max_model_len {max_model_len}; nothing left",
                path=path,
            )
        return 0, count
    rows.prompt, rows.output = clip_to_context(rows.prompt, rows.output, max_model_len)
    if rows.prefix_tokens is not None:
        rows.prefix_tokens = np.minimum(rows.prefix_tokens, rows.prompt)
    return count, 0


def clip_to_context(
    prompt: IntArray, output: IntArray, max_model_len: int
) -> tuple[IntArray, IntArray]:
    """Fit each (prompt, output) into ``max_model_len`` tokens as a serving engine would see it.
    A prompt that fits (at most max_model_len - 1 tokens) is kept and the output cut to the
    context left (the engine stops generating there). A prompt that does not fit is cut to what
    the output, itself at most max_model_len - 1, leaves. Rows that fit are unchanged."""
    fits = prompt < max_model_len
    output = np.where(
        fits,
        np.minimum(output, max_model_len - prompt),
        np.minimum(output, max_model_len - 1),
    )
    return np.minimum(prompt, max_model_len - output), output


def _order(rows: RawRows, path: str, strict: bool, warn: Warn) -> int:
    """Make arrivals start at 0 and never decrease; returns how many went backwards."""
    if rows.arrival_s is None:
        return 0
    arrival = rows.arrival_s
    backwards = np.flatnonzero(np.diff(arrival) < 0)
    count = len(backwards)
    if count:
        i = int(backwards[0]) + 1
        where = rows.where(i, rows.arrival_field)
        before = rows.where(i - 1, rows.arrival_field)
        message = (
            f"timestamp goes backwards by {arrival[i - 1] - arrival[i]:.6f} s "
            f"(earlier than {before})"
        )
        if strict:
            raise where.error(
                f"{message}; {plural(count, 'row')} out of order",
                path,
                hint="sort the file by time, or drop --strict to have it sorted on load",
            )
        out_of_order = f"{plural(count, 'row')} out of order"
        warn(f"{where.in_file(path)}: {message}; {out_of_order}, sorted by time")
        order = np.argsort(arrival, kind="stable")
        rows.keep(order)
        arrival = rows.arrival_s
        assert arrival is not None
    rows.arrival_s = arrival - arrival[0]
    return count
