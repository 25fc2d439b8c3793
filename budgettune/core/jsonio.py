"""Reading JSON from files budgettune may not have written, bounded before anything is
allocated: every reader of a JSON document (results, sweep settings, points, profiles, model
configs, traces in JSON) goes through here.

- size: a file larger than its reader's ``max_bytes`` is refused before it is read (a pipe is
  read up to that many bytes, once);
- text: UTF-8 only, with the offset of the first byte that is not;
- shape: nesting at most :data:`MAX_DEPTH` deep, and no more text, containers and values than fit in
  :data:`MAX_PARSED_BYTES` of memory once parsed (checked by a scan of the bytes, before the
  parse, so ``[[[[...`` or ``[{},{},...]`` cost nothing);
- values: ``NaN`` and ``Infinity`` are refused where a document cannot hold them (budgettune
  writes JSON without them).

Errors are UserError naming ``where`` (the file, with ``:LINE`` for a JSON Lines record).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from budgettune.core.errors import StorageError, UserError

MAX_DEPTH = 64  # budgettune's documents nest 6 deep
DOCUMENT_BYTES = 16 << 20  # settings, profiles, model configs, one JSON Lines record
RESULTS_BYTES = 256 << 20  # results.json, a vllm bench result: every request's token times
# What reading one document may hold at once: its text, and the parsed objects (estimated
# from the text first), so that no input, of any shape or size, takes a gigabyte.
MAX_PARSED_BYTES = 896 << 20
READ_CHUNK = 1 << 20
# What parsed JSON costs in CPython, from the sizes of its objects: a list or dict with its
# header and growth, a number or short string and its slot. Conservative: measured per kind.
_CONTAINER_BYTES = 120
_VALUE_BYTES = 40
_SCAN_BLOCK = 8 << 20


def mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB" if size >= 2**20 else f"{size:,} bytes"


def read_bounded(path: Path | str, max_bytes: int, what: str) -> bytes:
    """The bytes of ``path``, at most ``max_bytes`` (UserError beyond, naming the limit). A
    regular file's size is checked before reading; a pipe or FIFO is read once."""
    name = str(path)
    try:
        handle = open(name, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        raise UserError(f"{name}: no such {what} file") from None
    except IsADirectoryError:
        raise UserError(f"{name}: is a folder, not a {what} file") from None
    except OSError as error:
        raise UserError(f"{name}: cannot open: {error.strerror or error}") from None
    with handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            if size > max_bytes:
                raise too_large(name, what, max_bytes)
            data = handle.read(max_bytes + 1)
        except OSError as error:
            raise StorageError(f"{name}: cannot read: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise too_large(name, what, max_bytes)
    return data


def too_large(name: str, what: str, max_bytes: int) -> UserError:
    return UserError(f"{name}: larger than the {mib(max_bytes)} budgettune reads as a {what} file")


def utf8(data: bytes, where: str) -> str:
    """``data`` as text; UserError naming the offset of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(
            f"{where}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); "
            "is it a JSON file?"
        ) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (write null for a missing value)")


def loads(data: bytes | str, where: str, *, allow_nan: bool = False) -> Any:
    """The JSON value in ``data``, after the shape checks; UserError naming ``where``."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
    check_shape(raw, where)
    return _parse(utf8(raw, where), where, allow_nan)


def read_stream_json(
    stream: Any, where: str, what: str, *, max_bytes: int = RESULTS_BYTES, allow_nan: bool = False
) -> Any:
    """The JSON value in a binary ``stream`` (a decompressing one too), read a chunk at a time
    up to ``max_bytes``; its bytes are let go before the parse (see :func:`read_json`)."""
    try:  # a regular file (or a compressed one: its stored size) is refused unread
        stored = os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        stored = 0
    if stored > max_bytes:
        raise too_large(where, what, max_bytes)
    chunks: list[bytes] = []
    size = 0
    while chunk := stream.read(READ_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            raise too_large(where, what, max_bytes)
        chunks.append(chunk)
    raw = b"".join(chunks)
    del chunks
    check_shape(raw, where)
    text = utf8(raw, where)
    del raw  # the bytes go before the objects come
    return _parse(text, where, allow_nan)


def _parse(text: str, where: str, allow_nan: bool) -> Any:
    try:
        if allow_nan:
            return json.loads(text)
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise UserError(
            f"{where}: not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None
    except ValueError as error:  # parse_constant's
        raise UserError(f"{where}: {error}") from None
    except RecursionError:  # the scan bounds the depth; a guard all the same
        raise UserError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None


def read_json(
    path: Path | str, what: str, *, max_bytes: int = DOCUMENT_BYTES, allow_nan: bool = False
) -> Any:
    """The JSON value in the file ``path`` (see :func:`read_bounded` and :func:`loads`); its
    bytes are let go before the parse, so text and objects are never all held at once."""
    where = str(path)
    raw = read_bounded(path, max_bytes, what)
    check_shape(raw, where)
    text = utf8(raw, where)
    del raw
    return _parse(text, where, allow_nan)


def check_shape(raw: bytes, where: str) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH, or that would take more than MAX_PARSED_BYTES
    once parsed. The memory bound counts brackets and commas (C-speed ``bytes.count``; inside
    strings too, so it errs high); the depth scans the brackets outside strings with numpy, a
    block at a time."""
    containers = raw.count(b"[") + raw.count(b"{")
    values = raw.count(b",") + raw.count(b":")
    if len(raw) + containers * _CONTAINER_BYTES + values * _VALUE_BYTES > MAX_PARSED_BYTES:
        raise UserError(
            f"{where}: {mib(len(raw))} of text with {containers:,} lists or objects and "
            f"{values:,} values would take more than the {mib(MAX_PARSED_BYTES)} budgettune "
            "gives one JSON document"
        )
    if containers <= MAX_DEPTH:
        return
    import numpy as np

    depth = 0
    in_string = False
    backslashes = 0  # the run of backslashes that ended the previous block
    for start in range(0, len(raw), _SCAN_BLOCK):
        count = min(_SCAN_BLOCK, len(raw) - start)
        block = np.frombuffer(raw, np.uint8, count, start)
        folded = block | 32  # '[' and '{' fold to 123, ']' and '}' to 125
        marks = np.flatnonzero((folded == 123) | (folded == 125))
        quotes = np.flatnonzero(block == 34)
        escapes = raw.count(b"\\", start, start + count)
        if len(quotes) and (backslashes or escapes):
            plain = np.flatnonzero(block != 92)
            before = np.searchsorted(plain, quotes) - 1  # the last non-backslash before it
            last = np.where(before >= 0, plain[np.maximum(before, 0)], -1)
            run = quotes - 1 - last + np.where(last < 0, backslashes, 0)
            quotes = quotes[run % 2 == 0]  # an escaped quote does not end a string
        outside = (np.searchsorted(quotes, marks) + in_string) % 2 == 0
        step = np.where(folded[marks[outside]] == 123, 1, -1)
        if len(step):
            levels = depth + np.cumsum(step)
            if int(levels.max()) > MAX_DEPTH:
                raise UserError(f"{where}: nested deeper than {MAX_DEPTH} levels")
            depth = int(levels[-1])
        in_string = bool((in_string + len(quotes)) % 2)
        chunk = raw[start : start + count]
        tail = count - len(chunk.rstrip(b"\\"))
        backslashes = tail + (backslashes if tail == count else 0)


def max_depth_of(value: Any) -> int:
    """How deep ``value`` (parsed JSON) nests, without recursion (for tests and guards)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return deepest
