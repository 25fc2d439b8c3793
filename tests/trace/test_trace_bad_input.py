"""Every bad-input case names the file, the line and the field; the CLI exits 2 with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.core.errors import SpecError, TraceError
from budgettune.trace import blocks
from budgettune.trace.load import clip_to_context, load_trace

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW1 = "2023-11-16 18:15:46.6805900,374,44\n"
ROW2 = "2023-11-16 18:15:50.9951690,396,109\n"
ROW3 = "2023-11-16 18:15:52.0000000,100,10\n"


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# (file name, content, load_trace kwargs, expected message parts)
CASES = {
    "missing column": (
        "a.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.6805900,374\n",
        {"format": "azure"},
        ["a.csv:1:", "field 'GeneratedTokens': missing column", "TIMESTAMP, ContextTokens"],
    ),
    "non-numeric length": (
        "b.csv",
        AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.9951690,lots,109\n",
        {},
        ["b.csv:3:", "field 'ContextTokens'", "'lots' is not a number"],
    ),
    "negative length": (
        "c.csv",
        AZURE_HEADER + ROW1 + ROW2 + "2023-11-16 18:15:52.0000000,100,-3\n",
        {},
        ["c.csv:4:", "field 'GeneratedTokens'", "-3 (negative)"],
    ),
    "fractional length": (
        "d.jsonl",
        '{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": 10.5, "output_tokens": 5}\n',
        {},
        ["d.jsonl:2:", "field 'prompt_tokens'", "10.5 is not a whole number"],
    ),
    "missing JSON field": (
        "e.jsonl",
        '{"prompt_tokens": 10, "output_tokens": 5}\n\n{"prompt_tokens": 10}\n',
        {},
        ["e.jsonl:3:", "field 'output_tokens'", "missing"],
    ),
    "broken JSON line": (
        "f.jsonl",
        '{"prompt_tokens": 10, "output_tokens": 5}\n{"prompt_tokens": 10, \n',
        {},
        ["f.jsonl:2:", "not valid JSON"],
    ),
    "compensating field counts": (
        "r.csv",
        AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.9951690,396,109,7\n"
        "2023-11-16 18:15:51.9951690,396\n",
        {},
        ["r.csv:3:", "expected 3 fields like the header, found 4"],
    ),
    "absurd length": (
        "s.csv",
        AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.9951690,396,99999999999999999999\n",
        {},
        ["s.csv:3:", "field 'GeneratedTokens'", "is too large"],
    ),
    "absurd JSON length": (
        "t.jsonl",
        '{"prompt_tokens": 5, "output_tokens": 1}\n'
        '{"prompt_tokens": 5, "output_tokens": 99999999999999999999999}\n',
        {},
        ["t.jsonl:2:", "field 'output_tokens'", "is too large"],
    ),
    "bad timestamp": (
        "g.csv",
        AZURE_HEADER + ROW1 + "2023-11-16 25:15:50.9951690,396,109\n",
        {},
        ["g.csv:3:", "field 'TIMESTAMP'", "'2023-11-16 25:15:50.9951690'"],
    ),
    "wrong field count": (
        "h.csv",
        AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.9951690,396\n",
        {},
        ["h.csv:3:", "expected 3 fields like the header, found 2"],
    ),
    "backwards timestamp with --strict": (
        "i.csv",
        AZURE_HEADER + ROW1 + ROW3 + ROW2,
        {"strict": True},
        [
            "i.csv:4:",
            "field 'TIMESTAMP'",
            "goes backwards by",
            "earlier than line 3",
            "1 row out of order",
        ],
    ),
    "empty file": ("j.csv", "", {}, ["j.csv:", "empty file"]),
    "header only": ("k.csv", AZURE_HEADER, {}, ["k.csv:", "no requests"]),
    "unknown content": (
        "l.csv",
        "x,y,z\n1,2,3\n",
        {},
        ["l.csv:1:", "cannot tell the format", "known formats: budgettune, azure, mooncake"],
    ),
    "too long with --on-long error": (
        "m.csv",
        AZURE_HEADER + ROW1 + ROW2 + ROW3,
        {"max_model_len": 400},
        ["m.csv:2:", "prompt 374 + output 44 tokens exceed max_model_len 400", "2 such"],
    ),
    "prefix longer than prompt": (
        "n.jsonl",
        '{"prompt_tokens": 10, "output_tokens": 5, "prefix_group": 0, "prefix_tokens": 11}\n',
        {},
        ["n.jsonl:1:", "field 'prefix_tokens'", "exceeds the prompt"],
    ),
    "arrival on some lines only": (
        "o.jsonl",
        '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n'
        '{"prompt_tokens": 1, "output_tokens": 1}\n',
        {},
        ["o.jsonl:2:", "field 'arrival_s'", "every line or on none"],
    ),
    "vllm bench list of another length": (
        "p.json",
        '{"input_lens": [1, 2], "output_lens": [3]}',
        {},
        ["p.json:", "field 'output_lens'", "as long as input_lens (2)"],
    ),
    "vllm bench bad element": (
        "q.json",
        '{"input_lens": [1, "two"], "output_lens": [3, 4]}',
        {},
        ["q.json:", "field 'input_lens[1]'", "'two' is not a number"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_names_file_line_and_field(tmp_path: Path, case: str) -> None:
    name, text, kwargs, parts = CASES[case]
    path = write(tmp_path / name, text)
    with pytest.raises(TraceError) as error:
        load_trace(path, **kwargs)
    message = str(error.value)
    for part in parts:
        assert part in message, (part, message)
    assert error.value.path == path


def test_backwards_timestamps_warn_and_sort_without_strict(tmp_path: Path) -> None:
    path = write(tmp_path / "i.csv", AZURE_HEADER + ROW2 + ROW1 + ROW3)
    warnings: list[str] = []
    trace, report = load_trace(path, on_warning=warnings.append)
    assert report.out_of_order == 1
    assert trace.prompt_tokens.tolist() == [374, 396, 100]  # sorted by time
    assert trace.arrival_s is not None and trace.arrival_s[0] == 0.0
    assert np.all(np.diff(trace.arrival_s) >= 0)
    assert len(warnings) == 1 and f"{path}:3:" in warnings[0] and "sorted" in warnings[0]
    assert report.warnings == tuple(warnings)


def test_on_long_clip_and_drop_count_in_the_summary(tmp_path: Path) -> None:
    path = write(tmp_path / "m.csv", AZURE_HEADER + ROW1 + ROW2 + ROW3)
    trace, report = load_trace(path, max_model_len=400, on_long="clip")
    assert report.clipped == 2 and report.dropped == 0
    # the prompts fit: kept whole, the outputs cut to the context they leave
    assert trace.prompt_tokens.tolist() == [374, 396, 100]
    assert trace.output_tokens.tolist() == [26, 4, 10]
    assert "clipped 2 longer than max-model-len 400" in report.summary()
    trace, report = load_trace(path, max_model_len=300, on_long="clip")
    assert (trace.prompt_tokens + trace.output_tokens).max() <= 300
    trace, report = load_trace(path, max_model_len=400, on_long="drop")
    assert report.dropped == 2 and trace.prompt_tokens.tolist() == [100]
    assert trace.arrival_s is not None and trace.arrival_s.tolist() == [0.0]
    assert "dropped 2" in report.summary()


def test_clip_keeps_a_prompt_that_fits_and_cuts_one_that_does_not() -> None:
    prompt = np.array([100, 3000, 5000, 5000, 4096, 10], dtype=np.int64)
    output = np.array([5000, 2000, 50, 9000, 7, 20], dtype=np.int64)
    clipped_prompt, clipped_output = clip_to_context(prompt, output, 4096)
    # a prompt that fits stays whole (the engine stops generating at the context); a prompt
    # that does not is cut to what its output (at most 4095) leaves; the last row fits as is
    assert clipped_prompt.tolist() == [100, 3000, 4046, 1, 4089, 10]
    assert clipped_output.tolist() == [3996, 1096, 50, 4095, 7, 20]
    assert ((clipped_prompt + clipped_output) <= 4096).all() and (clipped_output >= 1).all()


def test_zero_output_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    path = write(tmp_path / "z.csv", AZURE_HEADER + ROW1 + "2023-11-16 18:15:50.9951690,396,0\n")
    warnings: list[str] = []
    trace, report = load_trace(path, on_warning=warnings.append)
    assert len(trace) == 1 and dict(report.skipped) == {"zero output tokens": 1}
    assert "first at line 3" in warnings[0]


def test_option_errors_are_spec_errors(tmp_path: Path) -> None:
    path = write(tmp_path / "a.csv", AZURE_HEADER + ROW1)
    with pytest.raises(SpecError, match="on_long: unknown value 'trim'"):
        load_trace(path, on_long="trim")
    with pytest.raises(SpecError, match=r"format: unknown trace format 'excel'.*azure"):
        load_trace(path, format="excel")
    with pytest.raises(SpecError, match="columns: unknown role 'input'"):
        load_trace(path, columns="input=ContextTokens,output=GeneratedTokens")
    with pytest.raises(SpecError, match="columns: applies to --format csv only"):
        load_trace(path, format="azure", columns="prompt=a,output=b")
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["trace", "inspect", "{dir}/b.csv"], ["b.csv:3:", "'lots' is not a number"]),
        (["trace", "inspect", "{dir}/i.csv", "--strict"], ["i.csv:4:", "goes backwards"]),
        (["trace", "inspect", "{dir}/b.csv", "--format", "nope"], ["known formats"]),
        (["trace", "inspect", "{dir}/empty.csv"], ["empty.csv:", "empty file"]),
    ],
)
def test_cli_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], parts: list[str]) -> None:
    write(tmp_path / "b.csv", CASES["non-numeric length"][1])
    write(tmp_path / "i.csv", AZURE_HEADER + ROW1 + ROW3 + ROW2)
    write(tmp_path / "empty.csv", "")
    result = CliRunner().invoke(app, [a.format(dir=tmp_path) for a in args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    # one error line, plus at most a hint line
    assert len(lines) <= 2 and all(line.startswith("  hint:") for line in lines[1:])
    for part in parts:
        assert part in result.output


def _budgettune() -> list[str]:
    exe = Path(sys.executable).with_name("budgettune")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "budgettune"]


def test_installed_command_reports_file_line_without_traceback(tmp_path: Path) -> None:
    path = write(tmp_path / "c.csv", CASES["negative length"][1])
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [*_budgettune(), "trace", "inspect", path],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("error: ")
    assert f"{path}:4: field 'GeneratedTokens'" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_installed_command_with_missing_column(tmp_path: Path) -> None:
    path = write(tmp_path / "p.csv", "ts,in\n1,2\n")
    done = subprocess.run(
        [*_budgettune(), "trace", "inspect", path, "--columns", "arrival=ts,prompt=in,output=out"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2
    assert f"{path}:1: field 'out': missing column; the header has: ts, in" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_stream_over_the_spool_limit_is_named_for_what_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO is 'a pipe' in the message; a device is not (/dev/zero was called a pipe)."""
    monkeypatch.setattr(blocks, "MAX_STREAM_BYTES", 1000)
    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    line = b'{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5}\n'

    def write_then_close() -> None:
        with open(fifo, "wb") as out:
            out.write(line * 100)

    writer = threading.Thread(target=write_then_close)
    writer.start()
    try:
        with pytest.raises(TraceError, match="MiB from a pipe; save it to a file first"):
            blocks.spool(fifo)
    finally:
        writer.join(10)
    with pytest.raises(TraceError, match="/dev/zero: holds binary data"):
        blocks.spool("/dev/zero")
