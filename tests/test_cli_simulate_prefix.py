"""`budgettune simulate --prefix-caching`: a trace's shared prefixes hit the simulated cache as
vLLM counts hits, shorten TTFT, and nothing is cached with ``off``; a bad value is one line."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from budgettune.cli import app

runner = CliRunner()


def _trace(path: Path) -> Path:
    # 12 requests, 10 s apart (each done before the next), 3 groups sharing 500-token prefixes.
    row = {"prompt_tokens": 900, "output_tokens": 4, "prefix_tokens": 500}
    lines = [json.dumps({"arrival_s": 10.0 * i, "prefix_group": i % 3, **row}) for i in range(12)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _points(*args: str) -> list[dict[str, object]]:
    result = runner.invoke(app, ["simulate", "--budgets", "512", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["points"]  # type: ignore[no-any-return]


def test_shared_prefixes_hit_by_default_and_not_with_off(tmp_path: Path) -> None:
    trace = str(_trace(tmp_path / "shared.jsonl"))
    (on,) = _points("--trace", trace)
    # Every request after its group's first hits 31 full blocks of 16 (496 of 500 tokens).
    assert on["prefix_cache"] == {
        "queries_tokens": 12 * 900, "hits_tokens": 9 * 496, "hit_share": round(9 * 496 / 10800, 4)
    }  # fmt: skip
    (off,) = _points("--trace", trace, "--prefix-caching", "off")
    assert "prefix_cache" not in off
    assert on["ttft_ms"]["p50"] < off["ttft_ms"]["p50"]  # type: ignore[index]


def test_a_bad_value_is_one_line() -> None:
    result = runner.invoke(app, ["simulate", "--prefix-caching", "sometimes"])
    assert result.exit_code != 0
    assert "--prefix-caching: use engine, on or off, got 'sometimes'" in result.output
    assert "Traceback" not in result.output
