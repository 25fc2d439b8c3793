"""CSV trace readers: Azure LLM inference (2023/2024), BurstGPT, Vidur/Sarathi, and plain CSV
with columns named by ``--columns``. All stream through :mod:`budgettune.trace.blocks`.
"""

from __future__ import annotations

import numpy as np

from budgettune.core.errors import SpecError, TraceError, shorten
from budgettune.trace.blocks import iter_csv_blocks, open_trace_file, read_csv_header, read_head
from budgettune.trace.convert import TimeColumn, parse_int_column
from budgettune.trace.schema import IntArray, RawRows


def _read_csv(path: str, roles: dict[str, str], optional: frozenset[str] = frozenset()) -> RawRows:
    """Read the columns named in ``roles`` (role -> header name, case-insensitive). Roles:
    arrival (seconds or wall-clock timestamps), arrival_ms, prompt, output, prefix_group,
    prefix_tokens."""
    header = read_csv_header(read_head(path), path)
    index: dict[str, int] = {}
    for role, name in roles.items():
        found = header.find(name)
        if found is None:
            if role in optional:
                continue
            raise TraceError(
                f"missing column; the header has: {shorten(', '.join(header.names))}",
                path=path,
                line=header.line,
                field=name,
            )
        index[role] = found
    names = {role: header.names[j] for role, j in index.items()}
    time_role = "arrival_ms" if "arrival_ms" in index else "arrival"
    clock = TimeColumn(
        path=path, field=names.get(time_role, ""), unit_s=1e-3 if time_role == "arrival_ms" else 1.0
    )
    parts: dict[str, list[np.ndarray]] = {role: [] for role in index}
    lines: list[IntArray] = []
    with open_trace_file(path) as stream:
        for block in iter_csv_blocks(stream, path, header, list(index.values())):
            for role, values in zip(index, block.columns, strict=True):
                if role in ("arrival", "arrival_ms"):
                    parts[role].append(clock.convert(values, block.line_numbers))
                else:
                    parts[role].append(
                        parse_int_column(values, block.line_numbers, path=path, field=names[role])
                    )
            lines.append(block.line_numbers)

    def column(role: str, dtype: type) -> np.ndarray | None:
        if role not in parts:
            return None
        return np.concatenate(parts[role]) if parts[role] else np.empty(0, dtype=dtype)

    arrival = column(time_role, np.float64)
    group = column("prefix_group", np.int64)
    tokens = column("prefix_tokens", np.int64)
    if (group is None) != (tokens is None):
        raise SpecError("prefix_group and prefix_tokens go together; name both", field="columns")
    prompt, output = column("prompt", np.int64), column("output", np.int64)
    assert prompt is not None and output is not None
    return RawRows(
        prompt=prompt,
        output=output,
        line_numbers=np.concatenate(lines) if lines else np.empty(0, dtype=np.int64),
        prompt_field=names["prompt"],
        output_field=names["output"],
        arrival_s=arrival,
        arrival_field=names.get(time_role, ""),
        prefix_group=group,
        prefix_tokens=tokens,
    )


def read_azure(path: str, columns: str | None) -> RawRows:
    roles = {"arrival": "TIMESTAMP", "prompt": "ContextTokens", "output": "GeneratedTokens"}
    return _read_csv(path, roles)


def read_burstgpt(path: str, columns: str | None) -> RawRows:
    roles = {"arrival": "Timestamp", "prompt": "Request tokens", "output": "Response tokens"}
    rows = _read_csv(path, roles)
    # BurstGPT logs failed requests with zero response tokens: not traffic to replay
    failed = rows.output == 0
    empty = (rows.prompt == 0) & ~failed
    rows.keep(~(failed | empty))
    rows.skipped += [
        ("zero response tokens (failed requests)", int(failed.sum())),
        ("zero request tokens", int(empty.sum())),
    ]
    return rows


def read_vidur(path: str, columns: str | None) -> RawRows:
    roles = {"arrival": "arrived_at", "prompt": "num_prefill_tokens", "output": "num_decode_tokens"}
    return _read_csv(path, roles, optional=frozenset({"arrival"}))


COLUMN_ROLES = ("arrival", "arrival_ms", "prompt", "output", "prefix_group", "prefix_tokens")
_DEFAULT_COLUMNS = "arrival=arrival_s,prompt=prompt_tokens,output=output_tokens"


def parse_columns(spec: str) -> dict[str, str]:
    """Parse ``arrival=ts,prompt=in,output=out`` into role -> column name (SpecError on field
    ``columns``)."""
    roles: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        role, eq, name = (s.strip() for s in part.partition("="))
        if not eq or not name:
            raise SpecError(
                f"{part!r} is not ROLE=COLUMN (e.g. {_DEFAULT_COLUMNS})", field="columns"
            )
        if role not in COLUMN_ROLES:
            raise SpecError(
                f"unknown role {role!r}; roles are {', '.join(COLUMN_ROLES)}", field="columns"
            )
        if role in roles:
            raise SpecError(f"role {role!r} given twice", field="columns")
        roles[role] = name
    for required in ("prompt", "output"):
        if required not in roles:
            raise SpecError(
                f"{spec!r} names no {required} column (e.g. {_DEFAULT_COLUMNS})", field="columns"
            )
    if "arrival" in roles and "arrival_ms" in roles:
        raise SpecError(
            "give arrival (seconds or timestamps) or arrival_ms, not both", field="columns"
        )
    return roles


def read_plain_csv(path: str, columns: str | None) -> RawRows:
    if columns is None:
        roles = parse_columns(
            _DEFAULT_COLUMNS + ",prefix_group=prefix_group,prefix_tokens=prefix_tokens"
        )
        optional = frozenset({"arrival", "prefix_group", "prefix_tokens"})
    else:
        roles, optional = parse_columns(columns), frozenset()
    return _read_csv(path, roles, optional)
