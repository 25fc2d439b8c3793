"""Streaming text input for trace readers: transparent .gz/.zst, blocks of whole lines with their
file line numbers, and a fast CSV splitter that checks every row's field count.

Readers work a block (a few MB) at a time so that a million-row file never lives in memory as
Python objects all at once; every row keeps its 1-based line number for error messages.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import numpy.typing as npt

from budgettune.core.errors import TraceError
from budgettune.trace.schema import IntArray

BLOCK_BYTES = 8 << 20
MAX_LINE_BYTES = 4 << 20  # one line of a trace: a request is a few hundred bytes
MAX_STREAM_BYTES = 1 << 30  # a trace read from a pipe or FIFO is kept (spooled) up to this
_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_BOM = b"\xef\xbb\xbf"


class TracePath(str):
    """A trace's name as the user gave it (what messages show: ``/dev/stdin``), read from
    ``source``: the file itself, or the spooled copy of a pipe's bytes."""

    source: str

    def __new__(cls, name: str, source: str) -> TracePath:
        made = super().__new__(cls, name)
        made.source = source
        return made


@dataclass(slots=True)
class Spooled:
    """A trace path usable by every reader (each may open it more than once), and the copy to
    remove when done (None for a regular file, which is read in place)."""

    path: str
    copy: Path | None = None

    def close(self) -> None:
        if self.copy is not None:
            self.copy.unlink(missing_ok=True)


def _stream_kind(mode: int) -> str:
    """What a trace that is not a regular file is, in words (the messages name it)."""
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a stream"


def _check_text(head: bytes, name: str) -> None:
    """Refuse a stream whose first bytes hold a NUL and no compression magic: no trace format is
    binary, and a device such as /dev/zero would otherwise be copied up to MAX_STREAM_BYTES
    before anything could say so."""
    if b"\0" in head and not head.startswith((_GZIP_MAGIC, _ZSTD_MAGIC)):
        raise TraceError(
            "holds binary data (NUL bytes), not a trace; a trace is text (JSON lines or CSV), "
            "or gzip or zstd of it",
            path=name,
        )


def spool(path: str | Path) -> Spooled:
    """``path`` ready to be opened more than once: a regular file as it is; a pipe, a FIFO or
    a device read once, up to MAX_STREAM_BYTES, into a temporary file. Raises TraceError (also
    for a stream that starts with binary data)."""
    name = str(path)
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise TraceError("no such file", path=name) from None
    except OSError as error:
        raise TraceError(f"cannot open: {error.strerror}", path=name) from None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return Spooled(name)
    fd, copy_name = tempfile.mkstemp(prefix="budgettune-trace-")
    copy = Path(copy_name)
    try:
        with os.fdopen(fd, "wb") as out, open(name, "rb") as stream:
            total = 0
            while block := stream.read(BLOCK_BYTES):
                if total == 0:
                    _check_text(block, name)
                total += len(block)
                if total > MAX_STREAM_BYTES:
                    raise TraceError(
                        f"more than {MAX_STREAM_BYTES >> 20:,} MiB from {_stream_kind(mode)}; "
                        "save it to a file first",
                        path=name,
                    )
                out.write(block)
    except OSError as error:
        copy.unlink(missing_ok=True)
        raise TraceError(f"cannot read: {error.strerror or error}", path=name) from None
    except BaseException:
        copy.unlink(missing_ok=True)
        raise
    return Spooled(TracePath(name, copy_name), copy)


def open_trace_file(path: str | Path) -> BinaryIO:
    """Open ``path`` (a :class:`TracePath` from :func:`spool` reads its copy) for binary
    reading, decompressing gzip or zstd (by magic bytes, so the suffix does not matter). Raises
    TraceError for a missing file or for zstd without the ``zstandard`` package."""
    name = str(path)
    source = getattr(path, "source", name)
    try:
        raw = open(source, "rb")  # noqa: SIM115 - returned to the caller, who closes it
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
        return gzip.open(source, "rb")  # type: ignore[return-value]
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


def read_first_line(path: str | Path, skip_bytes: int = 0) -> bytes:
    """The line starting ``skip_bytes`` into the decompressed text (BOM removed), read whole up
    to MAX_LINE_BYTES: format detection's head may end inside a long first line. Raises
    TraceError for a longer one, as the line readers do."""
    with open_trace_file(path) as stream:
        try:
            data = stream.read(len(_BOM) + skip_bytes + MAX_LINE_BYTES + 1)
        except (OSError, EOFError) as error:
            raise TraceError(f"cannot read: {error}", path=str(path)) from None
    data = data.removeprefix(_BOM)
    line_number = data.count(b"\n", 0, skip_bytes) + 1
    data = data[skip_bytes:]
    cut = data.find(b"\n")
    if cut < 0 and len(data) > MAX_LINE_BYTES:
        raise line_too_long(str(path), line_number)
    return data if cut < 0 else data[:cut]


def line_too_long(path: str, line: int) -> TraceError:
    """The error of a line over MAX_LINE_BYTES, said alike by every reader."""
    return TraceError(
        f"a line longer than {MAX_LINE_BYTES >> 20} MiB; is it a trace?", path=path, line=line
    )


@dataclass(slots=True)
class RawBlock:
    """Whole lines of the file joined by ``\\n`` (no trailing newline): ``count`` lines, the
    first of which is line ``first_line`` (1-based)."""

    data: bytes
    first_line: int
    count: int


def iter_raw_blocks(
    stream: BinaryIO, path: str, *, skip_lines: int = 0, block_bytes: int | None = None
) -> Iterator[RawBlock]:
    """Yield the file a block of whole lines at a time, after skipping ``skip_lines`` lines.
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
                if len(data) > MAX_LINE_BYTES:
                    raise line_too_long(path, next_line)
                pending = data
                continue
            data, pending = data[:cut], data[cut + 1 :]
        else:
            data, pending = pending, b""
            if not data:
                return
        count = data.count(b"\n") + 1
        first_line = next_line
        next_line += count
        while skip_lines and count:
            cut = data.find(b"\n")
            data = data[cut + 1 :] if cut >= 0 else b""
            skip_lines, count, first_line = skip_lines - 1, count - 1, first_line + 1
        if count:
            yield RawBlock(data, first_line, count)
        if not chunk:
            return


@dataclass(slots=True)
class LineBlock:
    """Non-empty lines of one block (``\\r`` removed) and their 1-based line numbers."""

    lines: list[bytes]
    line_numbers: IntArray


def split_lines(block: RawBlock) -> LineBlock:
    """The block's lines without ``\\r`` and without empty lines, with their numbers."""
    lines = block.data.split(b"\n")
    numbers = np.arange(block.first_line, block.first_line + block.count, dtype=np.int64)
    if b"\r" in block.data:
        lines = [line.rstrip(b"\r") for line in lines]
    if not all(lines):
        keep = [i for i, line in enumerate(lines) if line]
        lines = [lines[i] for i in keep]
        numbers = numbers[keep]
    return LineBlock(lines, numbers)


def iter_line_blocks(
    stream: BinaryIO, path: str, *, skip_lines: int = 0, block_bytes: int | None = None
) -> Iterator[LineBlock]:
    """Yield blocks of whole non-empty lines, after skipping the first ``skip_lines`` lines."""
    for raw in iter_raw_blocks(stream, path, skip_lines=skip_lines, block_bytes=block_bytes):
        block = split_lines(raw)
        if block.lines:
            yield block


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
    """The raw fields of the selected columns for one block of rows, each column a numpy
    ``S`` (fixed-width bytes) array, and the rows' line numbers."""

    columns: list[npt.NDArray[np.bytes_]]
    line_numbers: IntArray


def _as_column(values: list[bytes]) -> npt.NDArray[np.bytes_]:
    return np.array(values, dtype=np.bytes_) if values else np.empty(0, dtype="S1")


def iter_csv_blocks(
    stream: BinaryIO, path: str, header: CsvHeader, selected: list[int]
) -> Iterator[CsvBlock]:
    """Yield the fields of columns ``selected`` block by block. Every row must have exactly as
    many fields as the header; the first row that does not raises TraceError at its line."""
    width = len(header.names)
    delim = header.delimiter.encode()
    for raw in iter_raw_blocks(stream, path, skip_lines=header.line):
        data = raw.data
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")  # Windows line ends; lines stay the same
            raw = RawBlock(data, raw.first_line, raw.count)
        plain = not (
            b"\r" in data
            or b'"' in data
            or b"\n\n" in data
            or data[:1] == b"\n"
            or data[-1:] == b"\n"
        )
        columns = _split_fast(data, raw.count, width, delim[0], selected) if plain else None
        if columns is not None:
            numbers = np.arange(raw.first_line, raw.first_line + raw.count, dtype=np.int64)
            yield CsvBlock(columns, numbers)
            continue
        block = split_lines(raw)
        if not block.lines:
            continue
        if any(b'"' in line for line in block.lines):
            yield _quoted_block(block.lines, block.line_numbers, path, header, selected)
            continue
        lines, numbers = block.lines, block.line_numbers
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
        if lines:
            fields = delim.join(lines).split(delim)
            yield CsvBlock([_as_column(fields[j::width]) for j in selected], numbers)


def _split_fast(
    data: bytes, count: int, width: int, delim: int, selected: list[int]
) -> list[npt.NDArray[np.bytes_]] | None:
    """The selected columns of ``count`` plain lines (no quotes, no blank lines), cut straight
    from the buffer with numpy; None when some line lacks ``width - 1`` delimiters (the caller
    then goes line by line to name it). The separators in file order must read
    (delim x (width - 1), newline) for every line."""
    buf = np.frombuffer(data, dtype=np.uint8)
    positions = np.flatnonzero((buf == delim) | (buf == 10))
    if len(positions) != count * width - 1:
        return None
    grid = np.append(positions, len(buf)).reshape(count, width)  # a virtual final newline
    kinds = np.append(buf[positions], np.uint8(10)).reshape(count, width)
    if not ((kinds[:, -1] == 10).all() and (kinds[:, :-1] == delim).all()):
        return None
    row_start = np.concatenate(([0], grid[:-1, -1] + 1))
    columns = []
    for j in selected:
        start = row_start if j == 0 else grid[:, j - 1] + 1
        columns.append(_gather(buf, start, grid[:, j]))
    return columns


def _gather(buf: npt.NDArray[np.uint8], start: IntArray, end: IntArray) -> npt.NDArray[np.bytes_]:
    """Fields buf[start:end] as a fixed-width bytes array (NUL-padded, as numpy's ``S``)."""
    length = end - start
    width = max(int(length.max()) if len(length) else 0, 1)
    # rows of a sliding-window view: one contiguous copy of `width` bytes per field
    padded = np.concatenate([buf, np.zeros(width, dtype=np.uint8)])
    matrix = np.lib.stride_tricks.sliding_window_view(padded, width)[start]
    if int(length.min()) < width:
        matrix *= np.arange(width)[None, :] < length[:, None]  # NULs past each field's end
    return matrix.view(f"S{width}").ravel()


def _quoted_block(
    lines: list[bytes], numbers: IntArray, path: str, header: CsvHeader, selected: list[int]
) -> CsvBlock:
    """Slow path for blocks with quoted fields: the csv module, row by row."""
    width = len(header.names)
    columns: list[list[bytes]] = [[] for _ in selected]  # filled row by row below
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
    return CsvBlock([_as_column(column) for column in columns], numbers)
