"""`profile --from FILE.csv`: iteration times measured elsewhere, read as a profile's probes.

The file is CSV with a header line naming at least the columns ``prefill_tokens``,
``decode_batch``, ``context_tokens`` and ``ms`` (``milliseconds`` also reads; other columns are
ignored). Each row is one timed iteration: a prompt of prefill_tokens at offset 0 beside
decode_batch decodes at context_tokens each. Rows of the same shape are repeats of one probe.
A row with no decodes is a prefill probe, one with no prompt a decode probe, one with both a
mixed probe. The shipped reference curves (``data/aiconfigurator/*.csv``) are such files.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from budgettune.core.errors import SpecError
from budgettune.core.limits import MAX_SEQS, MAX_TOKENS
from budgettune.model.profile import Probe

COLUMNS = ("prefill_tokens", "decode_batch", "context_tokens", "ms")
ALIASES = {"milliseconds": "ms"}


def read_iteration_csv(path: Path, *, field: str = "from_csv") -> tuple[Probe, ...]:
    """The probes of ``path`` in file order of their first row. Raises SpecError on ``field``
    (the option that named the file) with ``FILE:LINE`` for a bad row, a missing column or an
    unreadable file."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror or exc}", field=field) from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a text file (UTF-8 CSV expected)", field=field) from None
    reader = csv.reader(text.splitlines())
    header = next(reader, None)
    if header is None:
        raise SpecError(f"{path}: empty file; expected a header line", field=field)
    names = [ALIASES.get(h.strip().lower(), h.strip().lower()) for h in header]
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise SpecError(
            f"{path}:1: missing column(s) {', '.join(missing)}; the header needs "
            f"{', '.join(COLUMNS)}",
            field=field,
        )
    at = {c: names.index(c) for c in COLUMNS}
    times: dict[tuple[int, int, int], list[float]] = {}
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) < len(names):
            raise SpecError(
                f"{path}:{line}: {len(row)} field(s), the header names {len(names)}", field=field
            )
        shape = tuple(_count(row[at[c]], c, path, line, field) for c in COLUMNS[:3])
        prompt, batch, context = shape
        ms = _milliseconds(row[at["ms"]], path, line, field)
        if prompt == 0 and batch == 0:
            raise SpecError(
                f"{path}:{line}: prefill_tokens and decode_batch are both 0: an empty iteration",
                field=field,
            )
        if batch > 0 and context == 0:
            raise SpecError(
                f"{path}:{line}: {batch} decodes need their context_tokens (at least 1)",
                field=field,
            )
        if batch == 0 and context != 0:
            raise SpecError(
                f"{path}:{line}: context_tokens is the decodes' context; a row with no decodes "
                f"has 0, got {context}",
                field=field,
            )
        times.setdefault((prompt, batch, context), []).append(ms / 1e3)
    if not times:
        raise SpecError(f"{path}: no rows after the header", field=field)
    # A fit needs shapes to compare: one shape repeated fits nothing ("nan us/token"), and one
    # prefill size gives the prefill line no slope.
    if len(times) < 2:
        raise SpecError(
            f"{path}: every row times one iteration shape; a step-time model needs at least two",
            field=field,
        )
    prefill_sizes = {p for p, b, _ in times if b == 0}
    if len(prefill_sizes) == 1:
        raise SpecError(
            f"{path}: the prefill rows (decode_batch 0) time one size only ({min(prefill_sizes)} "
            "tokens); the prefill line and its ridge need at least two sizes",
            field=field,
        )
    return tuple(
        Probe(_series(p, b), p, b, c, tuple(values)) for (p, b, c), values in times.items()
    )


def _series(prompt: int, batch: int) -> str:
    if batch == 0:
        return "prefill"
    return "decode" if prompt == 0 else "mixed"


def _count(text: str, column: str, path: Path, line: int, field: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SpecError(
            f"{path}:{line}: {column} must be a whole number, got {text.strip()!r}", field=field
        ) from None
    if value < 0:
        raise SpecError(f"{path}:{line}: {column} must be 0 or more, got {value}", field=field)
    maximum = MAX_SEQS if column == "decode_batch" else MAX_TOKENS
    if value > maximum:
        raise SpecError(
            f"{path}:{line}: {column} {value:,} is more than budgettune takes (at most "
            f"{maximum:,})",
            field=field,
        )
    return value


def _milliseconds(text: str, path: Path, line: int, field: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise SpecError(
            f"{path}:{line}: ms must be a number of milliseconds, got {text.strip()!r}",
            field=field,
        ) from None
    if not (math.isfinite(value) and value > 0):
        raise SpecError(f"{path}:{line}: ms must be positive, got {value:g}", field=field)
    return value
