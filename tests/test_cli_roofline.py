"""`budgettune roofline` and the CLI shell, through the installed command and CliRunner."""

from __future__ import annotations

import json
import subprocess

import pytest
from typer.testing import CliRunner

from budgettune import __version__
from budgettune.cli import app

runner = CliRunner()


def run(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


def test_version(budgettune_cmd: list[str]) -> None:
    result = run(budgettune_cmd, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"budgettune {__version__}"


def test_no_command_prints_the_help_not_an_error(budgettune_cmd: list[str]) -> None:
    """`budgettune` (or `budgettune trace`) alone shows the help, as click does, with no
    'error:' line from the one-line parser-error handler."""
    for args in ([], ["trace"]):
        result = run(budgettune_cmd, *args)
        assert result.returncode == 2
        output = result.stdout + result.stderr
        assert "Usage: budgettune" in output and "error:" not in output


def test_help_lists_units_and_defaults() -> None:
    result = runner.invoke(app, ["roofline", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--overhead-ms" in text and "ms" in text and "0.5" in text
    assert "--calibration" in text and "measured" in text and "seed" in text


def test_ridge_json_h100(budgettune_cmd: list[str]) -> None:
    args = ["roofline", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"]
    result = run(budgettune_cmd, *args, "--calibration", "seed")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ridge_tokens"] == pytest.approx(221.4, abs=0.1)  # the textbook roofline's figure
    assert doc["calibration"] == "seed"
    assert "step_ms" not in doc  # no iteration was asked about: no made-up 0 ms step
    # The default: the measured calibration, whose ridge is the fitted figures' (engine
    # accounting: the LM head and embedding out of the per-token FLOPs), said so.
    from budgettune.core.hardware import resolve_gpu, resolve_model
    from budgettune.model.stepmodel import StepModel

    default = json.loads(run(budgettune_cmd, *args).stdout)
    measured = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    assert default["calibration"] == "measured"
    assert "AIConfigurator" in default["calibration_source"]
    assert default["ridge_tokens"] == pytest.approx(measured.ridge_tokens)
    assert default["ridge_tokens"] > 1.2 * doc["ridge_tokens"]


def test_iteration_json_matches_model() -> None:
    result = runner.invoke(
        app,
        [
            "roofline",
            "--prefill",
            "512",
            "--prefill",
            "256@1024",
            "--decodes",
            "32",
            "--context",
            "1000",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    from budgettune.core.hardware import resolve_gpu, resolve_model
    from budgettune.model.stepmodel import StepModel

    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    expected = model.iteration_time_s([(512, 0), (256, 1024)], [1000] * 32)
    assert doc["step_ms"] == pytest.approx(expected * 1e3)
    assert doc["prefill_tokens"] == 768 and doc["tokens"] == 800


def test_serialized_mode_adds_the_decode_kv_read(budgettune_cmd: list[str]) -> None:
    # 2048 prompt tokens and 64 decodes are compute-bound (~58 ms of FLOPs against ~9 ms of
    # bytes), so the overlapped variant hides the decodes' KV read and the serialized one adds
    # it: 64 x 1000 tokens x 131,072 B / (0.8 x 3.35 TB/s) = 3.1301 ms.
    args = ["roofline", "--prefill", "2048", "--decodes", "64", "--context", "1000", "--json"]
    args += ["--calibration", "seed"]
    docs = {}
    for mode in ("overlapped", "serialized"):
        result = run(budgettune_cmd, *args, "--mode", mode)
        assert result.returncode == 0, result.stderr
        docs[mode] = json.loads(result.stdout)
        assert docs[mode]["mode"] == mode and docs[mode]["compute_bound"]
    kv_read_ms = 64 * 1000 * 131_072 / (0.8 * 3.35e12) * 1e3
    difference_ms = docs["serialized"]["step_ms"] - docs["overlapped"]["step_ms"]
    assert difference_ms == pytest.approx(kv_read_ms, rel=1e-9)


def test_long_decode_contexts_make_an_iteration_memory_bound() -> None:
    # 500 tokens (above the 221-token ridge) but 200 decodes at context 100,000 read 2.6 TB of
    # KV cache (978 ms) against ~18 ms of FLOPs: memory-bound, whatever the token count says.
    args = ["roofline", "--prefill", "300", "--decodes", "200", "--context", "100000"]
    args += ["--calibration", "seed"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["tokens"] == 500 and not doc["compute_bound"]
    assert doc["step_ms"] == pytest.approx(984.6, abs=0.1)
    assert "memory-bound" in " ".join(runner.invoke(app, args).output.split())


def test_chunking_json_shape_and_ordering() -> None:
    args = ["roofline", "--prompt", "4096", "--chunk-sizes", "128,256,512,2048", "--json"]
    result = runner.invoke(app, [*args, "--calibration", "seed"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    rows = doc["chunking"]
    assert [r["chunk_tokens"] for r in rows] == [128, 256, 512, 2048]
    assert [len(r["step_ms"]) for r in rows] == [32, 16, 8, 2]
    assert rows[0]["below_ridge"] and not rows[1]["below_ridge"]
    # smaller chunks re-read the weights more often: overhead falls as chunks grow
    overheads = [r["overhead_pct"] for r in rows]
    assert overheads == sorted(overheads, reverse=True)
    assert all(r["total_ms"] >= doc["one_shot_ms"] for r in rows)
    assert sum(rows[2]["step_ms"]) == pytest.approx(rows[2]["total_ms"])


def test_table_marks_chunks_below_ridge() -> None:
    result = runner.invoke(app, ["roofline", "--prompt", "2048", "--chunk-sizes", "128,1024"])
    assert result.exit_code == 0
    assert "below ridge" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--gpu", "h300"], "--gpu: unknown GPU preset 'h300'"),
        (["--model", "gpt-9"], "--model: 'gpt-9'"),
        (["--prefill", "12x"], "--prefill: cannot read '12x'"),
        (["--decodes", "-3"], "--decodes: must be zero or more"),
        (
            ["--peak-tflops", "100"],
            "--bandwidth-tbs: a custom GPU needs the memory bandwidth (TB/s) and the memory size",
        ),
        (["--compute-efficiency", "1.5"], "--compute-efficiency: must be in (0, 1]"),
        (["--mode", "parallel"], "--mode: unknown variant 'parallel'"),
        (["--calibration", "guessed"], "--calibration: unknown calibration 'guessed'"),
        (["--kv-bandwidth-efficiency", "0"], "--kv-bandwidth-efficiency: must be in (0, 1]"),
        (["--overhead-ms", "-1"], "--overhead-ms: must be zero or positive"),
        (["--prompt", "100", "--chunk-sizes", "64,x"], "--chunk-sizes: 'x'"),
    ],
)
def test_bad_input_one_line_exit_2(budgettune_cmd: list[str], args: list[str], needle: str) -> None:
    result = run(budgettune_cmd, "roofline", *args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:")
    assert result.stderr.count("\n") <= 2  # the error line and, at most, one hint line


def test_a_preset_without_measured_data_says_it_is_estimated() -> None:
    covered = runner.invoke(app, ["roofline", "--gpu", "h100-sxm"])
    estimated = runner.invoke(app, ["roofline", "--gpu", "h100-pcie"])
    assert covered.exit_code == estimated.exit_code == 0
    assert "estimated from its nearest sibling" not in " ".join(covered.output.split())
    said = " ".join(estimated.output.split())
    assert "h100-pcie not covered, estimated from its nearest sibling, h100-sxm's figures" in said
