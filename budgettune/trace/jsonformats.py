"""JSON trace readers: budgettune's own JSON Lines, Mooncake/FAST'25 JSON Lines (with shared
prefixes derived from block hashes), and ``vllm bench serve`` result documents.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from budgettune.core import jsonio
from budgettune.core.errors import TraceError, UserError
from budgettune.trace.blocks import iter_line_blocks, open_trace_file
from budgettune.trace.schema import IntArray, RawRows, RowLocation, SharedBlocks

MOONCAKE_BLOCK_TOKENS = 512


def _iter_json_objects(path: str) -> Iterator[tuple[list[dict[str, Any]], IntArray, bytes]]:
    """JSON Lines, one object a line, a block at a time (one C-level parse per block). Yields
    the objects, their line numbers and the block's text (for cheap key checks)."""
    with open_trace_file(path) as stream:
        for block in iter_line_blocks(stream, path):
            lines = block.lines
            text = b",".join(lines)
            try:
                objects = json.loads(b"[" + text + b"]")
            except (ValueError, RecursionError):
                objects = None
            if objects is None or len(objects) != len(lines):
                objects = []
                for raw, number in zip(lines, block.line_numbers, strict=True):
                    if not raw.strip():
                        continue
                    try:
                        objects.append(json.loads(raw))
                    except RecursionError:
                        raise TraceError(
                            "nested too deep to be a trace record", path=path, line=int(number)
                        ) from None
                    except UnicodeDecodeError:
                        raise TraceError(
                            "not UTF-8 text; is it a trace?", path=path, line=int(number)
                        ) from None
                    except ValueError as error:
                        message = getattr(error, "msg", str(error))
                        raise TraceError(
                            f"not valid JSON ({message})", path=path, line=int(number)
                        ) from None
            if set(map(type, objects)) != {dict}:
                for obj, number in zip(objects, block.line_numbers, strict=True):
                    if not isinstance(obj, dict):
                        raise TraceError(
                            "expected one JSON object per line", path=path, line=int(number)
                        )
            yield objects, block.line_numbers, text


def _json_numbers(
    values: list[Any], where: Callable[[int], RowLocation], path: str, *, whole: bool
) -> np.ndarray:
    """A list of JSON numbers to int64 (``whole``) or float64; TraceError at the first bad one."""
    try:
        array = np.array(values)
    except (ValueError, OverflowError):
        array = np.array([], dtype=object)
    kind = array.dtype.kind if array.ndim == 1 else "O"
    if len(values) == 0:
        return np.empty(0, dtype=np.int64 if whole else np.float64)
    if kind in "iu" and len(array) == len(values) and not _has_bool(values):
        return array.astype(np.int64 if whole else np.float64)
    if (
        kind == "f"
        and not _has_bool(values)
        and np.all(np.isfinite(array))
        and (not whole or np.all(array == np.rint(array)))
        and np.all(np.abs(array) < 2**62)
    ):
        return array.astype(np.int64 if whole else np.float64)
    for i, value in enumerate(values):
        if value is None:
            raise where(i).error("missing (or null)", path)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise where(i).error(f"{_short(value)} is not a number", path)
        if isinstance(value, int) and abs(value) >= 2**62:
            raise where(i).error(f"{_short(value)} is too large", path)
        if not np.isfinite(value):
            raise where(i).error(f"{value!r} is not a finite number", path)
        if abs(value) >= 2**62:
            raise where(i).error(f"{value!r} is too large", path)
        if whole and value != int(value):
            raise where(i).error(f"{value!r} is not a whole number of tokens", path)
    raise AssertionError("unreachable: numpy refused a list every value of which is a number")


def _has_bool(values: list[Any]) -> bool:
    """Whether a JSON ``true`` or ``false`` hides among numbers (numpy reads them as 1 and 0)."""
    return any(value is True or value is False for value in values)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _lines_where(lines: IntArray, field_name: str) -> Callable[[int], RowLocation]:
    return lambda i: RowLocation(int(lines[i]), field_name)


def read_budgettune(path: str, columns: str | None) -> RawRows:
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("p", "o", "a", "g", "t", "n")}
    has_arrival: bool | None = None
    for objects, lines, text in _iter_json_objects(path):
        if has_arrival is None:
            has_arrival = "arrival_s" in objects[0]
            first_line = int(lines[0])
        mentions = text.count(b'"arrival_s"')
        consistent = mentions == len(objects) if has_arrival else mentions == 0
        for obj, number in zip(objects, [] if consistent else lines, strict=False):
            if ("arrival_s" in obj) != has_arrival:
                raise TraceError(
                    "must be on every line or on none "
                    f"(line {first_line} {'has' if has_arrival else 'has no'} arrival_s)",
                    path=path,
                    line=int(number),
                    field="arrival_s",
                )
        for key, name in (("p", "prompt_tokens"), ("o", "output_tokens")):
            values = [obj.get(name) for obj in objects]
            parts[key].append(_json_numbers(values, _lines_where(lines, name), path, whole=True))
        if has_arrival:
            values = [obj.get("arrival_s") for obj in objects]
            where = _lines_where(lines, "arrival_s")
            parts["a"].append(_json_numbers(values, where, path, whole=False))
        if b'"prefix_' in text:
            groups = [obj.get("prefix_group", -1) for obj in objects]
            tokens = [obj.get("prefix_tokens", 0) for obj in objects]
            where_g, where_t = (
                _lines_where(lines, "prefix_group"),
                _lines_where(lines, "prefix_tokens"),
            )
            parts["g"].append(_json_numbers(groups, where_g, path, whole=True))
            parts["t"].append(_json_numbers(tokens, where_t, path, whole=True))
        else:  # no shared prefixes in this block
            parts["g"].append(np.full(len(objects), -1, dtype=np.int64))
            parts["t"].append(np.zeros(len(objects), dtype=np.int64))
        parts["n"].append(lines)
    cat = {k: (np.concatenate(v) if v else np.empty(0, dtype=np.int64)) for k, v in parts.items()}
    with_prefix = bool(np.any(cat["g"] >= 0) or np.any(cat["t"] > 0))
    return RawRows(
        prompt=cat["p"],
        output=cat["o"],
        line_numbers=cat["n"],
        prompt_field="prompt_tokens",
        output_field="output_tokens",
        arrival_s=cat["a"].astype(np.float64) if has_arrival else None,
        arrival_field="arrival_s",
        prefix_group=cat["g"] if with_prefix else None,
        prefix_tokens=cat["t"] if with_prefix else None,
    )


def _shared_paths(hash_ids: list[list[int]]) -> list[list[int]]:
    """Each request's run of leading blocks that at least one other request also starts with
    (the part a prefix cache could serve), as nodes of the trace's prefix tree: a node stands
    for a block and every block before it, so equal nodes mean equal prefixes."""
    node_of: dict[tuple[int, Any], int] = {}
    visits: list[int] = []
    paths: list[list[int]] = []
    for ids in hash_ids:
        parent, path = -1, []
        for block in ids:
            node = node_of.setdefault((parent, block), len(visits))
            if node == len(visits):
                visits.append(0)
            visits[node] += 1
            path.append(node)
            parent = node
        paths.append(path)
    shared_paths = []
    for path in paths:
        shared = 0
        while shared < len(path) and visits[path[shared]] >= 2:
            shared += 1
        shared_paths.append(path[:shared])
    return shared_paths


def shared_blocks(
    hash_ids: list[list[int]], prompt_tokens: IntArray, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> SharedBlocks:
    """The blocks each request shares with another, exactly as the hashes record them (a tree
    of shared blocks, not one prefix per group), at most as many as its prompt fills."""
    paths = _shared_paths(hash_ids)
    return SharedBlocks.from_lists(
        [
            path[: -(-int(prompt) // block_tokens)]
            for path, prompt in zip(paths, prompt_tokens, strict=True)
        ],
        block_tokens,
    )


def shared_prefixes(
    hash_ids: list[list[int]], prompt_tokens: IntArray, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> tuple[IntArray, IntArray]:
    """Prefix groups from Mooncake-style block hashes, for formats that hold one prefix per
    request: a request's shared prefix is its longest run of leading blocks that another request
    also starts with, capped at its prompt. Its group is numbered by its first block, in order of
    first appearance; -1 with 0 tokens when nothing is shared. Two requests of a group may then
    share more than the trace says (their runs can part after the first block):
    :func:`shared_blocks` keeps the tree."""
    group = np.full(len(hash_ids), -1, dtype=np.int64)
    tokens = np.zeros(len(hash_ids), dtype=np.int64)
    group_of_root: dict[int, int] = {}
    for i, path in enumerate(_shared_paths(hash_ids)):
        if path:
            group[i] = group_of_root.setdefault(path[0], len(group_of_root))
            tokens[i] = min(len(path) * block_tokens, int(prompt_tokens[i]))
    return group, tokens


def read_mooncake(path: str, columns: str | None) -> RawRows:
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("p", "o", "a", "n")}
    hashes: list[list[int]] = []
    for objects, lines, _ in _iter_json_objects(path):
        for key, name in (("p", "input_length"), ("o", "output_length")):
            values = [obj.get(name) for obj in objects]
            parts[key].append(_json_numbers(values, _lines_where(lines, name), path, whole=True))
        stamps = [obj.get("timestamp") for obj in objects]
        ms = _json_numbers(stamps, _lines_where(lines, "timestamp"), path, whole=False)
        parts["a"].append(ms / 1e3)
        for obj, number in zip(objects, lines, strict=True):
            ids = obj.get("hash_ids", [])
            if not isinstance(ids, list) or not all(
                isinstance(block, int | str) and not isinstance(block, bool) for block in ids
            ):
                raise TraceError(
                    f"expected a list of block hashes (numbers), got {_short(ids)}",
                    path=path,
                    line=int(number),
                    field="hash_ids",
                )
            hashes.append(ids)
        parts["n"].append(lines)
    cat = {k: (np.concatenate(v) if v else np.empty(0)) for k, v in parts.items()}
    prompt = cat["p"].astype(np.int64)
    _check_blocks_fit(hashes, prompt, cat["n"].astype(np.int64), path)
    group, tokens = shared_prefixes(hashes, prompt)
    blocks = shared_blocks(hashes, prompt)
    return RawRows(
        prompt=prompt,
        output=cat["o"].astype(np.int64),
        line_numbers=cat["n"].astype(np.int64),
        prompt_field="input_length",
        output_field="output_length",
        arrival_s=cat["a"].astype(np.float64),
        arrival_field="timestamp",
        prefix_group=group if np.any(group >= 0) else None,
        prefix_tokens=tokens if np.any(group >= 0) else None,
        shared_blocks=blocks if np.any(group >= 0) else None,
    )


def _check_blocks_fit(
    hash_ids: list[list[int]], prompt_tokens: IntArray, lines: IntArray, path: str
) -> None:
    """Refuse a row whose ``hash_ids`` name more 512-token blocks than its ``input_length``
    fills (Mooncake's last block is the prompt's remainder): its blocks and its length cannot
    both be true."""
    counts = np.array([len(ids) for ids in hash_ids], dtype=np.int64)
    needed = -(-prompt_tokens // MOONCAKE_BLOCK_TOKENS)
    bad = np.flatnonzero(counts > needed)
    if len(bad):
        i = int(bad[0])
        block = MOONCAKE_BLOCK_TOKENS
        raise TraceError(
            f"{counts[i]:,} blocks of {block} tokens ({counts[i] * block:,} tokens) for an "
            f"input_length of {int(prompt_tokens[i]):,}, which fills {int(needed[i]):,}",
            path=path,
            line=int(lines[i]),
            field="hash_ids",
        )


def read_vllm_bench(path: str, columns: str | None) -> RawRows:
    # vllm bench writes NaN where a value is missing: allowed, refused where it is read.
    try:
        with open_trace_file(path) as stream:
            document = jsonio.read_stream_json(
                stream, path, "vllm bench result", max_bytes=jsonio.RESULTS_BYTES, allow_nan=True
            )
    except (OSError, EOFError) as error:
        raise TraceError(f"cannot read (corrupt or truncated?): {error}", path=path) from None
    except UserError as error:
        raise TraceError(error.message.removeprefix(f"{path}: "), path=path) from None
    if not isinstance(document, dict) or "input_lens" not in document:
        raise TraceError("not a vllm bench result: no 'input_lens' list", path=path)
    n = len(document["input_lens"]) if isinstance(document["input_lens"], list) else -1
    for name in ("input_lens", "output_lens", "start_times", "errors"):
        value = document.get(name)
        if name in ("start_times", "errors") and value is None:
            continue
        if not isinstance(value, list) or len(value) != n:
            raise TraceError(f"expected a list as long as input_lens ({n})", path=path, field=name)
    index = np.arange(n, dtype=np.int64)

    def where(name: str) -> Callable[[int], RowLocation]:
        return lambda i: RowLocation(None, f"{name}[{i}]")

    rows = RawRows(
        prompt=_json_numbers(document["input_lens"], where("input_lens"), path, whole=True),
        output=_json_numbers(document["output_lens"], where("output_lens"), path, whole=True),
        line_numbers=index,
        prompt_field="input_lens",
        output_field="output_lens",
        indexed=True,
    )
    if document.get("start_times") is not None:
        start = _json_numbers(document["start_times"], where("start_times"), path, whole=False)
        rows.arrival_s = start.astype(np.float64)
        rows.arrival_field = "start_times"
    errors = document.get("errors") or [""] * n
    failed = np.array([bool(e) for e in errors], dtype=bool) | (rows.output == 0)
    rows.keep(~failed)
    rows.skipped.append(("failed requests (an error or no output)", int(failed.sum())))
    return rows
