"""Streaming text input for trace readers: transparent .gz/.zst, blocks of whole lines with their
file line numbers, and a fast CSV splitter that checks every row's field count.

Readers work a block (a few MB) at a time so that a million-row file never lives in memory as
Python objects all at once; every row keeps its 1-based line number for error messages.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from budgettune.errors import TraceError
from budgettune.trace.schema import IntArray

BLOCK_BYTES = 8 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_BOM = b"\xef\xbb\xbf"


def open_trace_file(path: str | Path) -> BinaryIO:
    """Open ``path`` for binary reading, decompressing gzip or zstd (by magic bytes, so the
    suffix does not matter). Raises TraceError for a missing file or for zstd without the
    ``zstandard`` package."""
    name = str(path)
    try:
        raw = open(name, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except FileNotFoundError:
        raise TraceError("no such file", path=name) from None
    except IsADirectoryError:
        raise TraceError("is a directory, not a trace file", path=name) from None
    except OSError as error:
        raise TraceError(f"cannot open: {error.strerror}", path=name) from None
    magic = raw.read(4)
    raw.seek(0)
    if magic.startswith(_GZIP_MAGIC):
        raw.close()  # gzip.open owns (and closes) its own file
        return gzip.open(name, "rb")  # type: ignore[return-value]
    if magic == _ZSTD_MAGIC:
        try:
            import zstandard
        except ImportError:
            raw.close()
            raise TraceError(
                "is zstd-compressed and the 'zstandard' package is not installed",
                path=name,
                hint="pip install zstandard, or decompress it first: zstd -d FILE",
            ) from None
        return zstandard.ZstdDecompressor().stream_reader(raw, closefd=True)
    return raw


def read_head(path: str | Path, size: int = 64 << 10) -> bytes:
    """The first ``size`` decompressed bytes (for format detection), BOM removed."""
    with open_trace_file(path) as stream:
        try:
            head = stream.read(size)
        except (OSError, EOFError) as error:
            raise TraceError(f"cannot read: {error}", path=str(path)) from None
    return head.removeprefix(_BOM)


@dataclass(slots=True)
class LineBlock:
    """Non-empty lines of one block (``\\r`` removed) and their 1-based line numbers."""

    lines: list[bytes]
    line_numbers: IntArray


def iter_line_blocks(
    stream: BinaryIO, path: str, *, skip_lines: int = 0, block_bytes: int | None = None
) -> Iterator[LineBlock]:
    """Yield blocks of whole non-empty lines, after skipping the first ``skip_lines`` lines.
    ``block_bytes`` defaults to the module's BLOCK_BYTES (read at call time)."""
    block_bytes = block_bytes or BLOCK_BYTES
    pending = b""
    next_line = 1
    first = True
    while True:
        try:
            chunk = stream.read(block_bytes)
        except (OSError, EOFError) as error:
            raise TraceError(f"cannot read (corrupt or truncated?): {error}", path=path) from None
        if first:
            chunk = chunk.removeprefix(_BOM)
            first = False
        if chunk:
            data = pending + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                pending = data
                continue
            data, pending = data[:cut], data[cut + 1 :]
        else:
            data, pending = pending, b""
            if not data:
                return
        lines = data.split(b"\n")
        count = len(lines)
        numbers = np.arange(next_line, next_line + count, dtype=np.int64)
        next_line += count
        if skip_lines:
            dropped = min(skip_lines, count)
            lines, numbers = lines[dropped:], numbers[dropped:]
            skip_lines -= dropped
        if b"\r" in data:
            lines = [line.rstrip(b"\r") for line in lines]
        if not all(lines):
            keep = [i for i, line in enumerate(lines) if line]
            lines = [lines[i] for i in keep]
            numbers = numbers[keep]
        if lines:
            yield LineBlock(lines, numbers)
        if not chunk:
            return


@dataclass(slots=True)
class CsvHeader:
    """The header row: stripped column names, the delimiter, and its line number."""

    names: list[str]
    delimiter: str
    line: int

    def find(self, name: str) -> int | None:
        """Index of the column named ``name`` (case-insensitive), or None."""
        wanted = name.strip().lower()
        for index, have in enumerate(self.names):
            if have.lower() == wanted:
                return index
        return None


def read_csv_header(head: bytes, path: str) -> CsvHeader:
    """Parse the first non-blank line of ``head`` as a CSV header (comma, else tab)."""
    for number, raw in enumerate(head.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError:
            raise TraceError("header is not UTF-8 text", path=path, line=number) from None
        delimiter = "," if "," in text or "\t" not in text else "\t"
        names = [name.strip() for name in next(csv.reader([text], delimiter=delimiter))]
        return CsvHeader(names, delimiter, number)
    raise TraceError("empty file (no header line)", path=path)


@dataclass(slots=True)
class CsvBlock:
    """The raw bytes of the selected columns for one block of rows."""

    columns: list[list[bytes]]
    line_numbers: IntArray


def iter_csv_blocks(
    stream: BinaryIO, path: str, header: CsvHeader, selected: list[int]
) -> Iterator[CsvBlock]:
    """Yield the fields of columns ``selected`` block by block. Every row must have exactly as
    many fields as the header; the first row that does not raises TraceError at its line."""
    width = len(header.names)
    delim = header.delimiter.encode()
    for block in iter_line_blocks(stream, path, skip_lines=header.line):
        lines, numbers = block.lines, block.line_numbers
        if any(b'"' in line for line in lines):
            yield _quoted_block(lines, numbers, path, header, selected)
            continue
        counts = np.fromiter((line.count(delim) for line in lines), np.int64, len(lines))
        bad = np.flatnonzero(counts != width - 1)
        if len(bad) and all(not lines[i].strip() for i in bad):
            # whitespace-only lines are blank lines, not rows
            keep = np.flatnonzero(counts == width - 1)
            lines = [lines[i] for i in keep]
            numbers, bad = numbers[keep], bad[:0]
        if len(bad):
            i = int(bad[0])
            raise TraceError(
                f"expected {width} fields like the header, found {counts[i] + 1}",
                path=path,
                line=int(numbers[i]),
            )
        fields = delim.join(lines).split(delim)
        yield CsvBlock([fields[j::width] for j in selected], numbers)


def _quoted_block(
    lines: list[bytes], numbers: IntArray, path: str, header: CsvHeader, selected: list[int]
) -> CsvBlock:
    """Slow path for blocks with quoted fields: the csv module, row by row."""
    width = len(header.names)
    columns: list[list[bytes]] = [[] for _ in selected]
    text = io.StringIO("\n".join(line.decode("utf-8", "replace") for line in lines))
    for row, number in zip(csv.reader(text, delimiter=header.delimiter), numbers, strict=False):
        if len(row) != width:
            raise TraceError(
                f"expected {width} fields like the header, found {len(row)}",
                path=path,
                line=int(number),
            )
        for out, j in zip(columns, selected, strict=True):
            out.append(row[j].encode())
    return CsvBlock(columns, numbers)
