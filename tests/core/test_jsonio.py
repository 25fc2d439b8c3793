"""core/jsonio: the one bounded JSON reader. What it refuses, refused before the parse, with
the file named; what budgettune writes, read back unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from budgettune.core import jsonio
from budgettune.core.errors import UserError


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[" * 100_000, "nested deeper than 64 levels"),
        (b'{"a":' * 100_000, "nested deeper than 64 levels"),
        (b"[" * 65 + b"]" * 65, "nested deeper than 64 levels"),
        (bytes(range(256)), "not UTF-8 text (byte 0x80 at offset 128)"),
        ('{"a": 1}'.encode("utf-16"), "not UTF-8 text (byte 0xff at offset 0)"),
        (b'{"a": NaN}', "NaN is not a JSON number"),
        (b'{"a": -Infinity}', "-Infinity is not a JSON number"),
        (b'{"a": 1', "not valid JSON"),
        (b"[" + b"[]," * 6_000_000 + b"[]]", "would take more than the 896 MiB"),
    ],
)
def test_refused_before_the_parse(
    data: bytes, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[int] = []  # the length of each text json.loads was given
    real_loads = json.loads

    def counting_loads(text: str, **kwargs: object) -> object:
        parsed.append(len(text))
        return real_loads(text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jsonio.json, "loads", counting_loads)
    with pytest.raises(UserError, match=re.escape(message)) as caught:
        jsonio.loads(data, "x.json")
    assert str(caught.value).startswith("x.json: ")
    # Depth, encoding and size are refused by the scan, before any parse; only what the parser
    # alone can see (a NaN, a torn document) reaches it, and those texts are a few bytes.
    parser_refusals = ("is not a JSON number", "not valid JSON")
    if any(refusal in message for refusal in parser_refusals):
        assert parsed == [len(data)]
    else:
        assert parsed == []


def test_brackets_and_escaped_quotes_in_strings_are_no_nesting() -> None:
    document = {"a": "[" * 500 + '\\"{' * 100 + "\\\\", "b": [[["x]"]]]}
    assert jsonio.loads(json.dumps(document).encode(), "x") == document
    nested: object = 1
    for _ in range(64):
        nested = [nested]
    assert jsonio.max_depth_of(jsonio.loads(json.dumps(nested), "x")) == 64


def test_nan_where_a_format_has_it(tmp_path: Path) -> None:
    assert jsonio.loads(b"[NaN]", "x", allow_nan=True)[0] != 0  # nan


def test_size_is_checked_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(2 << 30)  # 2 GiB of zeros, no disk taken
    with pytest.raises(UserError, match="larger than the 16 MiB budgettune reads"):
        jsonio.read_json(big, "profile")
    with pytest.raises(UserError, match="no such profile file"):
        jsonio.read_json(tmp_path / "none.json", "profile")
    with pytest.raises(UserError, match="is a folder"):
        jsonio.read_json(tmp_path, "profile")
