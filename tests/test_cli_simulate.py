"""`budgettune simulate` through the installed command and CliRunner: JSON shape, tables,
goodput, traces (a small one written here and the shipped slice of the real Azure one), the -o
results folder, and one-line errors for bad input."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import inspect
import itertools
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from budgettune.app.report import run_report
from budgettune.cli import app
from budgettune.cli.simulate import simulate
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.core.metrics import percentiles
from budgettune.model.stepmodel import StepModel

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
            "throughput_tokens_per_s", "completed", "failed", "prefix_cache",
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
    from budgettune.core.hardware import resolve_gpu, resolve_model
    from budgettune.model.stepmodel import StepModel

    default = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    assert (
        f"ridge P* = {default.ridge_tokens:.0f} tokens" in text and "KV cache 26,674 blocks" in text
    )
    assert "calibration measured" in text and "AIConfigurator" in text
    seed = runner.invoke(
        app, ["simulate", *SMALL, "--budgets", "128,1024", "--calibration", "seed"]
    )
    assert "ridge P* = 221 tokens" in " ".join(seed.output.split())  # the textbook roofline's
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


def _json(*args: str) -> dict:
    result = runner.invoke(app, ["simulate", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _write_trace(path: Path) -> Path:
    """Four requests one second apart, 100 prompt and 5 output tokens each."""
    rows = [{"arrival_s": float(i), "prompt_tokens": 100, "output_tokens": 5} for i in range(4)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_trace_replayed_at_its_recorded_times(tmp_path: Path) -> None:
    trace = str(_write_trace(tmp_path / "four.jsonl"))
    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    # One second apart, every request is alone: its prompt is one 100-token iteration (the
    # first token comes out of it) and then one decode iteration per token.
    prefill_ms = model.iteration_time_s(chunks=[(100, 0)]) * 1e3
    decode_ms = model.iteration_time_s(decode_contexts=[102]) * 1e3
    point = _json("--trace", trace, "--budgets", "512")["points"][0]
    assert point["rate"] == 1.0  # 3 gaps over 3 s
    assert point["completed"] == 4 and point["failed"] == 0
    assert point["ttft_ms"]["p50"] == pytest.approx(prefill_ms, rel=1e-9)
    assert point["ttft_ms"]["max"] == pytest.approx(prefill_ms, rel=1e-9)
    assert point["tbt_ms"]["p50"] == pytest.approx(decode_ms, rel=1e-3)
    assert point["e2e_ms"]["max"] == pytest.approx(prefill_ms + 4 * decode_ms, rel=1e-3)
    # --rate rescales the recorded gaps, --time-scale divides them; still one at a time.
    for args, rate in ((["--rate", "2"], 2.0), (["--time-scale", "4"], 4.0)):
        again = _json("--trace", trace, "--budgets", "512", *args)["points"][0]
        assert again["rate"] == pytest.approx(rate)
        assert again["ttft_ms"]["p50"] == pytest.approx(prefill_ms, rel=1e-9)
    # New Poisson arrivals draw the trace's rows: as many requests as asked, at the asked rate.
    drawn = _json("--trace", trace, "--arrivals", "poisson", "--rate", "50", "--requests", "40")
    assert [p["completed"] for p in drawn["points"]] == [40] * 6
    assert {p["rate"] for p in drawn["points"]} == {50.0}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--prompt-dist", "fixed:10"], "--prompt-dist: not with --trace"),
        (["--requests", "9"], "--requests: the recorded trace has only 4 requests"),
        (["--window", "10s:20s"], "--window: no requests arrive in [10 s, 20 s)"),
        (["--window", "10:20"], "--window: start: '10' has no unit; write 10ms or 10s"),
        (
            ["--rate", "2", "--time-scale", "2"],
            "--rate: give --rate or --time-scale for recorded",
        ),
        (["--arrivals", "gamma"], "--rate: required with --arrivals gamma"),
    ],
)
def test_bad_trace_options_one_line_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    trace = str(_write_trace(tmp_path / "four.jsonl"))
    result = runner.invoke(app, ["simulate", "--trace", trace, *args])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error:") and needle in result.stderr
    assert "Traceback" not in result.stderr


def _azure_window(path: Path, start_s: float, end_s: float) -> np.ndarray:
    """Arrival times (s from the trace's first request) of the Azure trace rows inside
    [start_s, end_s), read here with csv and datetime alone."""
    with path.open(newline="") as handle:
        stamps = [
            dt.datetime.strptime(row["TIMESTAMP"][:26], "%Y-%m-%d %H:%M:%S.%f")
            for row in csv.DictReader(handle)
        ]
    seconds = np.sort(np.array([(t - stamps[0]).total_seconds() for t in stamps]))
    return seconds[(seconds >= start_s) & (seconds < end_s)]


def test_azure_trace_window_and_time_scale(budgettune_cmd: list[str], azure_slice: Path) -> None:
    args = ["--trace", str(azure_slice), "--window", "1m:3m", "--time-scale", "2"]
    result = run(budgettune_cmd, *args, "--budgets", "512,none", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"points"}
    inside = _azure_window(azure_slice, 60.0, 180.0)
    recorded_rate = (len(inside) - 1) / (inside[-1] - inside[0])
    for point in doc["points"]:
        assert set(point) == {
            "budget", "rate", "ttft_ms", "tbt_ms", "tpot_ms", "e2e_ms",
            "throughput_tokens_per_s", "completed", "failed", "prefix_cache",
        }  # fmt: skip
        assert point["rate"] == pytest.approx(2 * recorded_rate, rel=1e-6)
        assert point["completed"] + point["failed"] == len(inside)
        for metric in ("ttft_ms", "tbt_ms", "tpot_ms", "e2e_ms"):
            assert _ordered(point[metric])
    chunked, none = doc["points"]
    assert chunked["tbt_ms"]["max"] < none["tbt_ms"]["max"]  # no whole-prompt iterations
    table = run(budgettune_cmd, *args, "--budgets", "512")
    text = " ".join(table.stdout.split())
    assert "azure-llm-2023-conv-slice.csv (azure), recorded x2" in text and "TBT" in text


def test_goodput_on_a_trace_meets_the_slo_at_the_rate_it_reports(azure_slice: Path) -> None:
    trace = ["--trace", str(azure_slice), "--window", "1m:2m", "--budgets", "512"]
    slo = ["--slo-tbt", "30ms", "--slo-ttft", "300ms"]
    doc = _json(*trace, "--goodput", *slo)
    rate = doc["goodput"][0]["rate"]
    assert rate > doc["points"][0]["rate"]  # a 512 budget has room above the recorded rate
    # The recorded trace rescaled to the goodput meets both SLOs.
    point = _json(*trace, "--rate", str(rate))["points"][0]
    assert point["rate"] == pytest.approx(rate)
    assert point["tbt_ms"]["p99"] <= 30.0 and point["ttft_ms"]["p99"] <= 300.0


def test_output_folder_results_and_report(tmp_path: Path) -> None:
    args = ["simulate", *SMALL, "--budgets", "256,none", "--warmup", "10", "--json"]
    plain = runner.invoke(app, args)
    written = runner.invoke(app, [*args, "-o", str(tmp_path / "run")])
    assert written.exit_code == 0, written.output
    assert written.stdout == plain.stdout  # -o changes nothing printed
    doc = json.loads(written.stdout)
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["kind"] == "simulate" and results["schema_version"] == 1
    config = results["config"]
    assert set(inspect.signature(simulate).parameters) <= set(config)  # every option's value
    assert config["budgets"] == "256,none" and config["warmup"] == 10
    assert config["slo_tbt_s"] == 0.05 and config["requests_simulated"] == 300
    assert results["hardware"]["gpu"] == "h100-sxm"
    assert "calibration measured" in config["step_model"] and "(h100-sxm)" in config["step_model"]
    for printed, stored in zip(doc["points"], results["points"], strict=True):
        assert {k: stored[k] for k in printed} == printed
        columns = stored["requests"]
        assert {len(v) for v in columns.values()} == {300}
        assert stored["warmup_requests"] == 10
        assert columns["target_s"] == sorted(columns["target_s"])
        # The stored TTFTs after warm-up give back the printed percentiles.
        ttft = percentiles(np.array(columns["ttft_ms"][10:], dtype=np.float64))
        assert ttft.p99 == pytest.approx(printed["ttft_ms"]["p99"], abs=1e-3)
        cdf = stored["tbt_cdf_ms"]
        assert np.all(np.diff(cdf["ms"]) >= 0) and np.all(np.diff(cdf["fraction"]) > 0)
        assert cdf["fraction"][-1] == 1.0
        assert cdf["ms"][-1] == pytest.approx(printed["tbt_ms"]["max"], abs=1e-4)
        assert cdf["samples"] == sum(t - 1 for t in columns["tokens"][10:])
    # Compact: per request and budget a few dozen bytes, not every token's time.
    size = (tmp_path / "run" / "results.json").stat().st_size
    assert size < 120 * 300 * 2
    page = (tmp_path / "run" / "report.html").read_text()
    assert "budgettune simulate" in page and 'id="chart-tbt-cdf"' in page
    assert 'id="chart-ttft-cdf"' in page
    # The page rebuilds from the results file alone, judged against the run's own SLOs.
    rebuilt = run_report(tmp_path / "run" / "results.json", output=tmp_path / "again.html")
    assert rebuilt.kind == "simulate"
    assert {"chart-tbt-cdf", "chart-ttft-cdf"} <= set(rebuilt.chart_ids)
    assert "p99 &lt;= 50 ms" in (tmp_path / "again.html").read_text()


def test_a_preset_without_measured_data_is_recorded_as_estimated(tmp_path: Path) -> None:
    # the A6000 is not in the silicon database: its figures are its nearest sibling's, and the
    # record says so where a reader of results.json looks for the step model
    done = runner.invoke(app, ["simulate", *SMALL, "--gpu", "a6000", "-o", str(tmp_path / "r")])
    assert done.exit_code == 0, done.output
    config = json.loads((tmp_path / "r" / "results.json").read_text())["config"]
    assert (
        "a6000 not covered, estimated from its nearest sibling, l40s's figures"
        in (config["step_model"])
    )


def test_output_folder_with_a_trace_records_its_checksum(tmp_path: Path) -> None:
    trace = _write_trace(tmp_path / "four.jsonl")
    result = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--budgets", "512", "-o", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.output
    # whitespace aside: the console folds a long path at any character, not only at spaces
    printed = "".join(result.stdout.split())
    assert f"results:{tmp_path / 'o' / 'results.json'}" in printed
    assert f"report:{tmp_path / 'o' / 'report.html'}" in printed
    config = json.loads((tmp_path / "o" / "results.json").read_text())["config"]
    assert config["trace"] == str(trace)
    assert config["trace_sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    assert "four.jsonl (budgettune), recorded" in config["traffic"]


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
        (["--arrivals", "weird"], "--arrivals: unknown mode 'weird'; use poisson or gamma"),
        (["--arrivals", "recorded"], "--arrivals: recorded needs --trace FILE"),
        (["--time-scale", "2"], "--time-scale: applies to recorded traces only"),
        (["--window", "0:10s"], "--window: applies to --trace only"),
        (["--burstiness", "0"], "--burstiness: must be a positive number"),
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
        (["--model", "nope"], "--model: 'nope' is neither a preset"),
        (["--slo-tbt", "50mss"], "--slo-tbt: cannot read '50mss' as a duration"),
        (["--prompt-dist", "lognormal:sigma=1"], "--prompt-dist: 'lognormal:sigma=1': lognormal"),
        # The option parser's own errors: one line too, where typer would draw a usage box.
        (["--rate", "abc"], "--rate: got 'abc': write a plain number, e.g. 16, 0.5 or 1e3"),
        (["--max-num-seqs=1.5"], "--max-num-seqs: got '1.5': write a plain whole number, e.g. 16"),
        (["--bogus", "3"], "No such option: --bogus"),
        (["--slo-tbt"], "Option '--slo-tbt' requires an argument"),
    ],
)
def test_bad_input_through_the_installed_command(
    budgettune_cmd: list[str], args: list[str], needle: str
) -> None:
    result = run(budgettune_cmd, *SMALL, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error:") and needle in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") <= 2
