"""Trace file formats by name (:data:`FORMATS`, for ``--format``) and detection of a file's
format from its content (:func:`detect_format`).

Readers (in :mod:`~budgettune.trace.csvformats` and :mod:`~budgettune.trace.jsonformats`)
return :class:`~budgettune.trace.schema.RawRows`; the checks common to every format live in
:mod:`budgettune.trace.load`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from budgettune.core.errors import SpecError, TraceError, shorten
from budgettune.trace import csvformats, jsonformats
from budgettune.trace.blocks import read_csv_header, read_first_line, read_head
from budgettune.trace.schema import RawRows

Reader = Callable[[str, str | None], RawRows]


@dataclass(frozen=True, slots=True)
class TraceFormat:
    """A readable format: its name (for --format), a one-line description, and its reader."""

    name: str
    description: str
    read: Reader


FORMATS: dict[str, TraceFormat] = {
    f.name: f
    for f in (
        TraceFormat(
            "budgettune",
            "JSON Lines: arrival_s, prompt_tokens, output_tokens",
            jsonformats.read_budgettune,
        ),
        TraceFormat(
            "azure",
            "Azure LLM inference CSV 2023/2024 (TIMESTAMP,ContextTokens,GeneratedTokens)",
            csvformats.read_azure,
        ),
        TraceFormat(
            "mooncake",
            "Mooncake/FAST'25 JSON Lines (timestamp ms, input_length, output_length, hash_ids)",
            jsonformats.read_mooncake,
        ),
        TraceFormat(
            "burstgpt",
            "BurstGPT CSV (Timestamp, Request tokens, Response tokens)",
            csvformats.read_burstgpt,
        ),
        TraceFormat(
            "vidur",
            "Vidur/Sarathi CSV ([arrived_at,]num_prefill_tokens,num_decode_tokens)",
            csvformats.read_vidur,
        ),
        TraceFormat(
            "vllm-bench",
            "vllm bench serve --save-result --save-detailed JSON",
            jsonformats.read_vllm_bench,
        ),
        TraceFormat(
            "csv",
            "any CSV, columns named by --columns arrival=..,prompt=..,output=..",
            csvformats.read_plain_csv,
        ),
    )
}


# CSV formats in detection order, by the (lower-case) header names that identify them
_CSV_SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("azure", frozenset({"timestamp", "contexttokens", "generatedtokens"})),
    ("burstgpt", frozenset({"request tokens", "response tokens"})),
    ("vidur", frozenset({"num_prefill_tokens", "num_decode_tokens"})),
    ("csv", frozenset({"prompt_tokens", "output_tokens"})),
)


def get_format(name: str) -> TraceFormat:
    """The format called ``name``; SpecError listing the known names otherwise."""
    key = name.strip().lower()
    if key not in FORMATS:
        raise SpecError(
            f"unknown trace format {name!r}; known formats: {', '.join(FORMATS)}", field="format"
        )
    return FORMATS[key]


HEAD_BYTES = 64 << 10  # what format detection reads first


def _json_or_none(text: bytes) -> object:
    """``text`` as JSON, or None (a document spread over lines, or no JSON at all)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _json_format(obj: object, path: str, known: str) -> str:
    """The format a trace's first JSON value names, or TraceError listing the known ones."""
    if isinstance(obj, dict) and "input_lens" in obj:
        return "vllm-bench"
    if isinstance(obj, dict):
        # one telling key is enough: the reader then names any missing one with its line
        if obj.keys() & {"hash_ids", "input_length", "output_length"}:
            return "mooncake"
        if obj.keys() & {"prompt_tokens", "output_tokens"}:
            return "budgettune"
    keys = shorten(", ".join(obj)) if isinstance(obj, dict) else type(obj).__name__
    raise TraceError(
        f"cannot tell the format from a JSON line with keys {keys}; known formats: {known}",
        path=path,
        line=1,
    )


def detect_format(path: str) -> str:
    """The format of ``path`` judged from its first line (header or first JSON object). A first
    line with only some of a format's telling names picks that format, whose reader then names
    what is missing. Raises TraceError (listing the known formats) when nothing fits."""
    head = read_head(path, HEAD_BYTES)
    first = next((line.strip() for line in head.split(b"\n") if line.strip()), b"")
    known = ", ".join(FORMATS)
    if not first:
        raise TraceError("empty file", path=path)
    if first[:1] in (b"{", b"["):
        obj = _json_or_none(first)
        if obj is None and b'"input_lens"' in head:
            # a JSON document over several lines (or longer than the head): vllm bench results
            return "vllm-bench"
        at = head.find(first)
        if obj is None and b"\n" not in head[at:] and len(head) >= HEAD_BYTES - 3:  # less a BOM
            # the head ended inside the first line: judge the whole line, or refuse it as too
            # long as the line readers do (a 200 MB line is no trace of any format)
            obj = _json_or_none(read_first_line(path, at).strip())
        if obj is None:
            raise TraceError(
                f"JSON that is not a known trace format; known formats: {known}", path=path
            )
        return _json_format(obj, path, known)
    header = read_csv_header(head, path)
    names = {name.lower() for name in header.names}
    for name, columns in _CSV_SIGNATURES:
        if columns <= names:
            return name
    # a header with some of one format's telling columns: that format's reader names the
    # missing one ("field 'GeneratedTokens': missing column") instead of "cannot tell the format"
    partial = [name for name, columns in _CSV_SIGNATURES if columns & names - {"timestamp"}]
    if len(partial) == 1:
        return partial[0]
    raise TraceError(
        f"cannot tell the format from the header {shorten(repr(','.join(header.names)))}; "
        f"known formats: {known}",
        path=path,
        line=header.line,
        hint="for your own CSV name the columns: --columns arrival=COL,prompt=COL,output=COL",
    )
