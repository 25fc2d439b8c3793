"""Every trace format read from small fixtures written here, detected from content, compressed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from budgettune.core.errors import SpecError, TraceError
from budgettune.trace import blocks
from budgettune.trace.formats import FORMATS, detect_format, get_format
from budgettune.trace.jsonformats import shared_prefixes
from budgettune.trace.load import load_trace


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.0000000,879,1
2023-11-16 18:16:01.5000000,12,300"""  # no trailing newline, as in the real file

AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,2048,20
2024-05-10 00:00:01+00:00,100,5
2024-05-10 02:00:01.5+02:00,300,7
"""

MOONCAKE = "\n".join(
    json.dumps(row)
    for row in (
        {"timestamp": 0, "input_length": 1500, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 1600, "output_length": 20, "hash_ids": [1, 2, 4]},
        {"timestamp": 1500, "input_length": 100, "output_length": 30, "hash_ids": [5]},
        {"timestamp": 1500, "input_length": 2000, "output_length": 40, "hash_ids": [1, 2, 3, 6]},
    )
)

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,276,693,API log
200,ChatGPT,0,12,12,API log
201,"GPT-4, large",50,60,110,API log
"""

VIDUR = """arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio
0.0,1000,100,1100,10.0
0.25,2000,50,2050,40.0
1.5,300,30,330,10.0
"""

VIDUR_LENGTHS = """num_prefill_tokens,num_decode_tokens,num_total_tokens
1000,100,1100
2000,50,2050
"""

VLLM_BENCH = {
    "date": "20250101-000000",
    "backend": "vllm",
    "completed": 3,
    "input_lens": [100, 200, 300, 400],
    "output_lens": [10, 0, 30, 40],
    "start_times": [1000.5, 1000.75, 1001.0, 1002.5],
    "errors": ["", "", "", "timeout"],
    "ttfts": [0.1, 0.0, 0.2, 0.0],
}

BUDGETTUNE = """{"arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 5}
{"arrival_s": 0.5, "prompt_tokens": 20, "output_tokens": 6, "prefix_group": 3, "prefix_tokens": 8}

{"arrival_s": 2.0, "prompt_tokens": 30, "output_tokens": 7}
"""


def test_azure_2023_timestamps_to_seconds_from_first(tmp_path: Path) -> None:
    trace, report = load_trace(write(tmp_path / "a.csv", AZURE_2023))
    assert trace.format == report.format == "azure"
    assert trace.prompt_tokens.tolist() == [374, 396, 879, 12]
    assert trace.output_tokens.tolist() == [44, 109, 1, 300]
    assert trace.arrival_s is not None
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s, and so on (100 ns resolution)
    expected = [0.0, 4.314579, 4.31941, 14.81941]
    np.testing.assert_allclose(trace.arrival_s, expected, atol=1e-9)


def test_azure_2024_offsets_and_short_fractions(tmp_path: Path) -> None:
    trace, _ = load_trace(write(tmp_path / "b.csv", AZURE_2024))
    assert trace.arrival_s is not None
    # 02:00:01.5+02:00 is 00:00:01.5 UTC
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.99007, 1.49007], atol=1e-9)


def test_mooncake_derives_shared_prefixes_from_leading_hashes(tmp_path: Path) -> None:
    trace, _ = load_trace(write(tmp_path / "m.jsonl", MOONCAKE))
    assert trace.format == "mooncake"
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.5, 1.5, 1.5])
    assert trace.prefix_group is not None and trace.prefix_tokens is not None
    # [1,2,3] shares 3 blocks with [1,2,3,6] (capped at its 1500-token prompt); [1,2,4] shares 2
    assert trace.prefix_group.tolist() == [0, 0, -1, 0]
    assert trace.prefix_tokens.tolist() == [1500, 1024, 0, 1536]


def test_shared_prefixes_number_groups_by_first_block() -> None:
    group, tokens = shared_prefixes(
        [[7, 8], [9], [7, 8, 1], [9, 2], [4]], np.array([5000, 600, 5000, 5000, 10])
    )
    assert group.tolist() == [0, 1, 0, 1, -1]
    assert tokens.tolist() == [1024, 512, 1024, 512, 0]


def test_burstgpt_skips_zero_rows_and_says_how_many(tmp_path: Path) -> None:
    warnings: list[str] = []
    trace, report = load_trace(write(tmp_path / "g.csv", BURSTGPT), on_warning=warnings.append)
    assert trace.format == "burstgpt"
    assert trace.prompt_tokens.tolist() == [472, 417, 50]  # quoted "GPT-4, large" row read
    assert trace.output_tokens.tolist() == [18, 276, 60]
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 113.0, 196.0])
    assert dict(report.skipped) == {
        "zero response tokens (failed requests)": 1,
        "zero request tokens": 1,
    }
    assert any("skipped 1 row with zero response tokens" in w for w in warnings)
    assert "skipped 1 row with zero response tokens" in report.summary()


def test_vidur_with_and_without_arrivals(tmp_path: Path) -> None:
    trace, _ = load_trace(write(tmp_path / "v.csv", VIDUR))
    assert trace.format == "vidur"
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 0.25, 1.5])
    assert trace.prompt_tokens.tolist() == [1000, 2000, 300]
    lengths, _ = load_trace(write(tmp_path / "l.csv", VIDUR_LENGTHS))
    assert lengths.arrival_s is None
    assert lengths.output_tokens.tolist() == [100, 50]


def test_vllm_bench_result_drops_failed_requests(tmp_path: Path) -> None:
    path = write(tmp_path / "r.json", json.dumps(VLLM_BENCH, indent=2))
    trace, report = load_trace(path)
    assert trace.format == "vllm-bench"
    # row 1 produced no output, row 3 has an error
    assert trace.prompt_tokens.tolist() == [100, 300]
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 0.5])
    assert dict(report.skipped) == {"failed requests (an error or no output)": 2}


def test_budgettune_jsonl_with_prefix_and_blank_lines(tmp_path: Path) -> None:
    trace, _ = load_trace(write(tmp_path / "t.jsonl", BUDGETTUNE))
    assert trace.format == "budgettune"
    assert trace.prompt_tokens.tolist() == [10, 20, 30]
    assert trace.prefix_group.tolist() == [-1, 3, -1]
    assert trace.prefix_tokens.tolist() == [0, 8, 0]
    lengths_only = '{"prompt_tokens": 5, "output_tokens": 6}\n'
    trace, _ = load_trace(write(tmp_path / "l.jsonl", lengths_only))
    assert trace.arrival_s is None and trace.prefix_group is None


def test_plain_csv_with_named_columns(tmp_path: Path) -> None:
    text = "id,ts,in,out\na,10.5,100,7\nb,11.0,200,8\n"
    path = write(tmp_path / "p.csv", text)
    trace, _ = load_trace(path, columns="arrival=ts,prompt=in,output=out")
    assert trace.format == "csv"
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 0.5])
    trace, _ = load_trace(path, columns="arrival_ms=ts,prompt=in,output=out")
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.0005])
    stamps = "when\tin\tout\n2024-01-01T00:00:00Z\t1\t2\n2024-01-01T00:01:00Z\t3\t4\n"
    trace, _ = load_trace(
        write(tmp_path / "t.tsv", stamps), columns="arrival=when,prompt=in,output=out"
    )
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 60.0])


def test_plain_csv_with_budgettune_column_names_is_detected(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,6\n1.5,7,8\n")
    assert detect_format(path) == "csv"
    trace, _ = load_trace(path)
    np.testing.assert_array_equal(trace.arrival_s, [0.0, 1.5])


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("a.csv", AZURE_2023, "azure"),
        ("b.csv", AZURE_2024, "azure"),
        ("m.jsonl", MOONCAKE, "mooncake"),
        ("g.csv", BURSTGPT, "burstgpt"),
        ("v.csv", VIDUR, "vidur"),
        ("l.csv", VIDUR_LENGTHS, "vidur"),
        ("r.json", json.dumps(VLLM_BENCH), "vllm-bench"),
        ("r2.json", json.dumps(VLLM_BENCH, indent=1), "vllm-bench"),
        ("t.jsonl", BUDGETTUNE, "budgettune"),
        # the suffix does not matter, only the content
        ("misleading.json", AZURE_2023, "azure"),
    ],
)
def test_detection_from_content(tmp_path: Path, name: str, text: str, expected: str) -> None:
    assert detect_format(write(tmp_path / name, text)) == expected


FIXTURES = {
    "azure": (AZURE_2023, 4),
    "azure-2024": (AZURE_2024, 3),
    "mooncake": (MOONCAKE, 4),
    "burstgpt": (BURSTGPT, 3),
    "vidur": (VIDUR, 3),
    "vidur-lengths": (VIDUR_LENGTHS, 2),
    "vllm-bench": (json.dumps(VLLM_BENCH), 2),
    "budgettune": (BUDGETTUNE, 3),
    "csv": ("arrival_s,prompt_tokens,output_tokens\n0,5,6\n1.5,7,8\n", 2),
}


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_each_format_by_name_and_gzipped_reads_as_detected(tmp_path: Path, fixture: str) -> None:
    text, rows = FIXTURES[fixture]
    name = fixture.split("-lengths")[0].replace("azure-2024", "azure")
    detected, _ = load_trace(write(tmp_path / "trace.dat", text))
    named, _ = load_trace(tmp_path / "trace.dat", format=name.upper())
    (tmp_path / "trace.gz").write_bytes(gzip.compress(text.encode()))
    gzipped, _ = load_trace(tmp_path / "trace.gz")
    assert detected.format == named.format == gzipped.format == name
    for trace in (named, gzipped):
        assert len(trace) == len(detected) == rows
        np.testing.assert_array_equal(trace.prompt_tokens, detected.prompt_tokens)
        np.testing.assert_array_equal(trace.output_tokens, detected.output_tokens)
        if detected.arrival_s is None:
            assert trace.arrival_s is None
        else:
            np.testing.assert_array_equal(trace.arrival_s, detected.arrival_s)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n", "'GeneratedTokens'"),
        ("Timestamp,Model,Request tokens\n5,ChatGPT,472\n", "'Response tokens'"),
        ("num_prefill_tokens,x\n5,6\n", "'num_decode_tokens'"),
        ("arrival_s,prompt_tokens\n0,5\n", "'output_tokens'"),
        ('{"timestamp": 0, "input_length": 5}\n', "field 'output_length'"),
        ('{"arrival_s": 0, "output_tokens": 5}\n', "field 'prompt_tokens'"),
    ],
)
def test_a_format_with_a_missing_column_is_named_not_unknown(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(TraceError) as error:
        load_trace(write(tmp_path / "t.txt", text))
    assert message in str(error.value) and "t.txt:1:" in str(error.value)
    assert "cannot tell the format" not in str(error.value)


def test_format_option_overrides_detection_and_unknown_names_are_listed(tmp_path: Path) -> None:
    path = write(tmp_path / "v.csv", VIDUR)
    trace, _ = load_trace(path, columns="prompt=num_prefill_tokens,output=num_decode_tokens")
    assert trace.format == "csv" and trace.arrival_s is None
    with pytest.raises(SpecError) as error:
        get_format("sharegpt")
    for name in FORMATS:
        assert name in str(error.value)
    with pytest.raises(TraceError, match="field 'TIMESTAMP': missing column"):
        load_trace(path, format="azure")


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    path = tmp_path / "a.csv.gz"
    path.write_bytes(gzip.compress(AZURE_2023.encode()))
    trace, _ = load_trace(path)
    assert trace.format == "azure" and len(trace) == 4


def test_zstd_is_read_or_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "a.csv.zst"
    try:
        import zstandard
    except ImportError:
        path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)
        with pytest.raises(TraceError, match="zstandard") as error:
            load_trace(path)
        assert str(path) in str(error.value)
    else:
        path.write_bytes(zstandard.ZstdCompressor().compress(AZURE_2023.encode()))
        trace, _ = load_trace(path)
        assert len(trace) == 4


def test_small_blocks_give_the_same_rows_and_line_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [f"{i * 0.5},{100 + i},{1 + i % 7}" for i in range(500)]
    text = "arrived_at,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n"
    path = write(tmp_path / "v.csv", text)
    whole, _ = load_trace(path)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 37)  # splits lines across reads
    pieces, _ = load_trace(path)
    np.testing.assert_array_equal(whole.prompt_tokens, pieces.prompt_tokens)
    np.testing.assert_array_equal(whole.arrival_s, pieces.arrival_s)
    assert whole.prompt_tokens.tolist() == [100 + i for i in range(500)]
    bad = text.replace("\n200.0,500,", "\n200.0,x,")
    assert bad != text
    with pytest.raises(TraceError) as error:
        load_trace(write(tmp_path / "bad.csv", bad))
    assert "bad.csv:402:" in str(error.value)  # row 400 (0-based) is on line 402


def test_round_trip_through_trace_rows(tmp_path: Path) -> None:
    trace, _ = load_trace(write(tmp_path / "t.jsonl", BUDGETTUNE))
    row = trace[1]
    assert (row.prompt_tokens, row.output_tokens, row.arrival_s) == (20, 6, 0.5)
    assert (row.prefix_group, row.prefix_tokens) == (3, 8)
    assert [r.prompt_tokens for r in trace] == [10, 20, 30]
