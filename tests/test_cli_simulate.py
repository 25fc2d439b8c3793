"""`budgettune simulate` through the installed command and CliRunner: JSON shape, tables,
goodput, and one-line errors for bad input."""

from __future__ import annotations

import itertools
import json
import subprocess

import pytest
from typer.testing import CliRunner

from budgettune.cli import app

runner = CliRunner()
SMALL = ["--requests", "300", "--seed", "1"]


def run(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, "simulate", *args], capture_output=True, text=True, timeout=120)


def _ordered(block: dict[str, float]) -> bool:
    values = [block[k] for k in ("p50", "p90", "p99", "p999", "max")]
    return all(a <= b for a, b in itertools.pairwise(values))


def test_json_document_shape(budgettune_cmd: list[str]) -> None:
    result = run(budgettune_cmd, *SMALL, "--budgets", "256,2048,none", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"points"}
    assert [p["budget"] for p in doc["points"]] == [256, 2048, None]
    for point in doc["points"]:
        assert set(point) == {
            "budget", "rate", "ttft_ms", "tbt_ms", "tpot_ms", "e2e_ms",
            "throughput_tokens_per_s", "completed", "failed",
        }  # fmt: skip
        assert point["rate"] == 16.0
        assert point["completed"] == 300 and point["failed"] == 0
        for metric in ("ttft_ms", "tbt_ms", "tpot_ms", "e2e_ms"):
            assert _ordered(point[metric])
        assert point["throughput_tokens_per_s"] > 0
    small, large, none = doc["points"]
    # Chunking bounds the gap between tokens: a 256 budget's worst gap is one 256-token
    # iteration, far below the whole-prompt iterations of the prefill-first policy.
    assert small["tbt_ms"]["max"] < 15.0 < none["tbt_ms"]["max"]
    assert small["tbt_ms"]["p99"] < large["tbt_ms"]["p99"] <= none["tbt_ms"]["p99"]


def test_same_seed_same_document(budgettune_cmd: list[str]) -> None:
    args = [*SMALL, "--budgets", "512", "--json"]
    first = run(budgettune_cmd, *args)
    again = run(budgettune_cmd, *args)
    in_process = runner.invoke(app, ["simulate", *args])
    other = runner.invoke(app, ["simulate", *args, "--seed", "2"])
    assert first.stdout == again.stdout == in_process.stdout
    assert first.stdout != other.stdout


def test_goodput_meets_the_slo_at_the_rate_it_reports(budgettune_cmd: list[str]) -> None:
    slo = ["--slo-tbt", "40ms", "--slo-ttft", "500ms"]
    result = run(budgettune_cmd, *SMALL, "--budgets", "512,none", "--goodput", *slo, "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [g["budget"] for g in doc["goodput"]] == [512, None]
    rates = {g["budget"]: g["rate"] for g in doc["goodput"]}
    assert rates[512] > 0
    for budget, rate in rates.items():
        if rate == 0:
            continue
        label = "none" if budget is None else str(budget)
        check = runner.invoke(
            app, ["simulate", *SMALL, "--budgets", label, "--rate", str(rate), "--json"]
        )
        point = json.loads(check.stdout)["points"][0]
        assert point["tbt_ms"]["p99"] <= 40.0 and point["ttft_ms"]["p99"] <= 500.0


def test_table_for_humans() -> None:
    result = runner.invoke(app, ["simulate", *SMALL, "--budgets", "128,1024,none"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "ridge P* = 221 tokens" in text and "KV cache 26,674 blocks" in text
    assert "128*" in text and "below the ridge" in text  # 128 < P*
    assert "1024" in text and "none" in text and "TTFT" in text and "TBT" in text


def test_rejected_requests_are_failed_not_dropped() -> None:
    # A 20 GB GPU leaves 0.9 x 20e9 - 16.06e9 bytes = 924 blocks (14,784 tokens) of KV cache:
    # a 20,000-token prompt can never run, and must show up as failed.
    gpu = ["--peak-tflops", "989", "--bandwidth-tbs", "3.35", "--memory-gb", "20"]
    args = ["simulate", "--requests", "20", "--budgets", "512", *gpu, "--output-dist", "fixed:10"]
    result = runner.invoke(app, [*args, "--prompt-dist", "fixed:20000", "--json"])
    assert result.exit_code == 0, result.output
    point = json.loads(result.output)["points"][0]
    assert point["failed"] == 20 and point["completed"] == 0
    assert point["ttft_ms"]["p99"] is None  # +inf: every request violates any TTFT SLO
    result = runner.invoke(app, [*args, "--prompt-dist", "uniform:min=10000,max=20000"])
    text = " ".join(result.output.split())
    assert "KV cache 924 blocks" in text and "failed" in text


def test_help_states_units_and_defaults() -> None:
    result = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for needle in (
        "--budgets", "requests/s", "--slo-tbt", "50ms", "--max-num-seqs", "256",
        "--gpu-memory-utilization", "0.9", "--block-size", "16", "--arrivals", "poisson",
        "--burstiness", "--seed", "--goodput", "--json", "--mode", "--tensor-parallel",
        "--peak-tflops", "--long-prefill-token-threshold", "--warmup",
    ):  # fmt: skip
        assert needle in text, needle


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "-1"], "--rate: must be a positive number, got -1.0"),
        (["--slo-tbt", "50mss"], "--slo-tbt: cannot read '50mss'"),
        (["--gpu", "h900"], "--gpu: unknown GPU preset 'h900'"),
        (["--model", "nope"], "--model: 'nope'"),
        (["--prompt-dist", "lognormal:mean=x"], "--prompt-dist:"),
        (["--output-dist", "zipf:1"], "--output-dist: unknown distribution"),
        (["--budgets", "256,abc"], "--budgets: cannot read 'abc'"),
        (["--budgets", "0"], "--budgets: a budget must be positive"),
        (["--requests", "0"], "--requests: must be positive"),
        (["--arrivals", "weird"], "--arrivals: unknown arrival process 'weird'"),
        (["--max-num-seqs", "0"], "--max-num-seqs: must be positive"),
        (["--block-aligned", "--budgets", "100"], "--budgets: 100 is not a multiple"),
        (["--model", "llama-3.1-70b", "--gpu", "a100-40g"], "--gpu-memory-utilization:"),
        (["--warmup", "300"], "--warmup: 300 leaves none"),
        (["--mode", "fast"], "--mode: unknown variant 'fast'"),
    ],
)
def test_bad_input_one_line_exit_2(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["simulate", *SMALL, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:")
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") <= 2  # the error line and, at most, one hint line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--rate", "-1"], "--rate: must be a positive number, got -1.0"),
        (["--slo-ttft", "1sec", "--goodput"], "--slo-ttft: cannot read '1sec'"),
        (["--gpu", "h900"], "--gpu: unknown GPU preset 'h900'"),
        (["--prompt-dist", "lognormal:sigma=1"], "--prompt-dist: 'lognormal:sigma=1': lognormal"),
    ],
)
def test_bad_input_through_the_installed_command(
    budgettune_cmd: list[str], args: list[str], needle: str
) -> None:
    result = run(budgettune_cmd, *SMALL, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error:") and needle in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") <= 2
