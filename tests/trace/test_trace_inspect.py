"""Trace statistics: hand-computed on a tiny trace, a slice of the real Azure 2023 trace, the
CLI."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.trace.inspect import log2_histogram, trace_stats
from budgettune.trace.load import load_trace
from budgettune.trace.schema import Trace


def test_stats_by_hand() -> None:
    trace = Trace(
        prompt_tokens=np.array([100, 600, 3000, 9000], dtype=np.int64),
        output_tokens=np.array([10, 20, 30, 40], dtype=np.int64),
        arrival_s=np.array([0.0, 1.0, 2.0, 6.0]),
        prefix_group=np.array([0, 0, -1, -1], dtype=np.int64),
        prefix_tokens=np.array([50, 50, 0, 0], dtype=np.int64),
    )
    stats = trace_stats(trace)
    assert stats.requests == 4
    assert stats.span_s == 6.0
    assert stats.rate_per_s == 0.5  # 3 gaps over 6 s
    # gaps 1, 1, 4: mean 2, population std sqrt(2)
    assert stats.interarrival_cv == pytest.approx(np.sqrt(2) / 2)
    assert stats.prompt_tokens.mean == 3175.0
    assert stats.prompt_tokens.p50 == 1800.0  # halfway between 600 and 3000
    assert stats.prompt_tokens.max == 9000
    assert dict(stats.prompt_share_above) == {512: 0.75, 2048: 0.5, 8192: 0.25}
    assert stats.shared_prefix_share == 0.5
    assert stats.shared_prefix_token_share == pytest.approx(100 / 12700)
    assert sum(stats.prompt_histogram.counts) == 4


def test_lengths_only_trace_has_no_time_figures() -> None:
    trace = Trace(
        prompt_tokens=np.array([5], dtype=np.int64), output_tokens=np.array([1], dtype=np.int64)
    )
    document = trace_stats(trace).to_json()
    assert document["span_s"] is None and document["rate_per_s"] is None
    assert document["interarrival_cv"] is None and document["shared_prefix_share"] is None


def test_log2_histogram_edges_and_counts() -> None:
    histogram = log2_histogram(np.array([1, 3, 4, 7, 8, 1024], dtype=np.int64))
    assert histogram.edges[0] == 1 and histogram.edges[-1] == 2048
    assert histogram.counts[:4] == (1, 1, 2, 1)  # [1,2) [2,4) [4,8) [8,16)
    assert histogram.counts[-1] == 1  # 1024 in [1024, 2048)


# The figures of the shipped slice (tests/data/README.md), computed with csv, datetime and numpy
# alone (linear-interpolated percentiles, rate = gaps / span, population CV of the gaps).
def test_real_azure_2023_conversation_trace(azure_slice: Path) -> None:
    trace, report = load_trace(azure_slice)
    assert report.format == "azure" and report.requests == 1_100 and not report.warnings
    stats = trace_stats(trace)
    assert stats.requests == 1_100
    assert round(stats.prompt_tokens.mean, 1) == 1276.3
    assert stats.prompt_tokens.p50 == 1070.5
    assert stats.prompt_tokens.p90 == pytest.approx(2999.7)
    assert stats.prompt_tokens.p99 == pytest.approx(4143.05)
    assert stats.prompt_tokens.max == 6472
    assert round(stats.output_tokens.mean, 1) == 237.0
    assert (stats.output_tokens.p50, stats.output_tokens.max) == (152.5, 1000)
    assert stats.rate_per_s is not None and round(stats.rate_per_s, 3) == 5.296
    assert stats.span_s is not None and round(stats.span_s, 1) == 207.5
    assert stats.interarrival_cv is not None and round(stats.interarrival_cv, 2) == 1.01


def test_inspect_json_keys(azure_slice: Path) -> None:
    result = CliRunner().invoke(app, ["trace", "inspect", str(azure_slice), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    issue_keys = {
        "requests",
        "span_s",
        "rate_per_s",
        "interarrival_cv",
        "prompt_tokens",
        "output_tokens",
    }
    assert issue_keys <= document.keys()
    # and the other figures the table shows, documented in traces/README.md
    extra = {
        "prompt_share_above", "shared_prefix_share", "shared_prefix_token_share",
        "cache_hit_share",
    }  # fmt: skip
    assert set(document) == issue_keys | extra
    assert set(document["prompt_share_above"]) == {"512", "2048", "8192"}
    assert document["shared_prefix_share"] is None  # Azure records no prefixes
    assert set(document["prompt_tokens"]) == {"mean", "p50", "p90", "p99", "max"}
    assert set(document["output_tokens"]) == {"mean", "p50", "p90", "p99", "max"}
    assert document["requests"] == 1_100
    assert document["prompt_tokens"]["p90"] == pytest.approx(2999.7)


def test_inspect_table_and_histograms(azure_slice: Path) -> None:
    result = CliRunner().invoke(app, ["trace", "inspect", str(azure_slice)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "1,100" in result.output
    assert "5.296 requests/s" in result.output
    assert "2,999.7" in result.output
    assert "1,024-2,047" in result.output and "█" in result.output
    assert "prompt tokens" in result.output and "output tokens" in result.output


def test_installed_command_reads_gzip_with_a_format_override(tmp_path: Path) -> None:
    text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    text += "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,0,1087,Conversation log\n"
    text += "118,GPT-4,417,276,693,API log\n"
    path = tmp_path / "burst.bin"  # no telling suffix: gzip by its magic bytes
    path.write_bytes(gzip.compress(text.encode()))
    exe = Path(sys.executable).with_name("budgettune")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "budgettune"]
    for extra in ([], ["--format", "burstgpt"]):
        done = subprocess.run(
            [*command, "trace", "inspect", str(path), "--json", *extra],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, done.stderr
        document = json.loads(done.stdout)
        assert document["requests"] == 2 and document["span_s"] == 113.0
        # the failed BurstGPT row is skipped and counted on stderr
        assert "skipped 1 row with zero response tokens" in done.stderr


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_inspect_on_a_terminal_without_block_characters(
    azure_slice: Path, budgettune_cmd: list[str], encoding: str
) -> None:
    """PYTHONIOENCODING=ascii (or a latin-1 terminal): the whole table and histograms, bars in
    '#', no UnicodeEncodeError half-way through."""
    done = subprocess.run(
        [*budgettune_cmd, "trace", "inspect", str(azure_slice)],
        capture_output=True, env={**os.environ, "PYTHONIOENCODING": encoding}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    text = done.stdout.decode(encoding)
    assert "Traceback" not in done.stderr.decode(errors="replace")
    assert "output tokens" in text and "#" * 10 in text and "█" not in text
