"""`budgettune profile` from the command line: analytic and torch runs, bad input (one line,
exit 2), and a probe failing midway (partial measurements saved)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.model.calibration import calibration_for
from budgettune.model.profile import load_profile


def _run(cmd: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "profile", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_analytic_tables(tmp_path: Path) -> None:
    """The seed calibration's worked figures (README): P* 221, floor 512, F and B."""
    out = tmp_path / "llama.json"
    args = ["profile", "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    result = CliRunner().invoke(app, [*args, "--calibration", "seed", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "not a measurement" in text
    assert "knee (two segments)" in text and "221 tokens" in text
    assert "budget floor" in text and "512 tokens" in text  # 221 + 64 decodes -> 512
    assert "593 TFLOP/s" in text and "2.68 TB/s" in text  # 0.6 x 989, 0.8 x 3.35
    assert "seed accounting" in text
    # The default calibration: the measured one's figures, its accounting named
    measured = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "measured.json")])
    assert measured.exit_code == 0, measured.output
    words = " ".join(measured.output.split())
    compute = calibration_for("measured", "h100-sxm").compute_efficiency * 989  # the table's share
    assert "engine accounting" in words and f"{compute:.0f} TFLOP/s" in words
    assert load_profile(tmp_path / "measured.json").step.accounting == "engine"  # type: ignore[union-attr]
    for target in ("25.0 ms", "50.0 ms", "100 ms"):
        assert target in text
    assert out.is_file() and out.with_suffix(".csv").is_file()


def test_analytic_json_through_the_installed_command(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    result = _run(
        budgettune_cmd,
        "--engine", "analytic", "--model", "mistral-7b", "--gpu", "a100-80g", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "analytic"
    assert doc["profile"] == "profiles/mistral-7b_a100-80g.json"  # the default name
    assert (tmp_path / doc["profile"]).is_file()
    budget = doc["budget"]
    ridge = doc["ridge"]["knee_tokens"]
    assert budget["knee_tokens"] == pytest.approx(ridge)
    assert budget["floor_tokens"] % 256 == 0
    assert budget["floor_tokens"] - 256 < ridge + budget["typical_batch"] <= budget["floor_tokens"]
    budgets = [b["budget_tokens"] for b in budget["tbt_budgets"]]
    assert [b["tbt_ms"] for b in budget["tbt_budgets"]] == [25.0, 50.0, 100.0]
    # on an A100 no budget fits 25 ms beside 64 decodes (measured calibration): null, said so
    reachable = [b for b in budgets if b is not None]
    assert budgets[-1] is not None and budgets[: len(budgets) - len(reachable)] == [None] * (
        len(budgets) - len(reachable)
    )
    assert all(b % 256 == 0 for b in reachable)
    assert reachable == sorted(reachable) and reachable[0] < reachable[-1]


@pytest.mark.slow
def test_torch_on_the_tiny_model(
    budgettune_cmd: list[str], tiny_config: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "tiny.json"
    result = _run(
        budgettune_cmd,
        "--engine", "torch", "--model", str(tiny_config), "--max-tokens", "1024",
        "--max-batch", "16", "--contexts", "128,512", "--repeats", "3", "--threads", "1",
        "--typical-batch", "8", "-o", str(out), "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "measured" and doc["engine"]["name"] == "torch"
    assert doc["hardware"]["kind"] in {"cpu", "gpu"}
    assert set(doc["step"]["errors"]) == {"prefill", "decode", "mixed"}
    assert doc["ridge"]["reason"]
    assert load_profile(out).complete


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error:"), stderr
    assert "Traceback" not in stderr
    assert len(lines) <= 2  # the message, and a hint when there is one
    return lines[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--engine", "tensorrt", "--model", "llama-3.1-8b"], "--engine: unknown engine"),
        (["--engine", "torch", "--model", "no/such/model"], "--model: 'no/such/model'"),
        (["--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "tpu-v9"], "--gpu"),
        (["--engine", "analytic", "--model", "llama-3.1-8b", "--repeats", "0"], "--repeats"),
        (["--engine", "torch", "--model", "llama-3.1-8b", "--max-tokens", "8kk"], "--max-tokens"),
        (["--engine", "torch", "--model", "yi-34b", "--max-tokens", "8192"], "max length 4096"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    budgettune_cmd: list[str], tmp_path: Path, args: list[str], expected: str
) -> None:
    result = _run(budgettune_cmd, *args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert expected in _one_error_line(result.stderr)
    assert not (tmp_path / "profiles").exists()  # nothing measured, nothing written


def test_max_tokens_beyond_a_config_json_max_length(
    budgettune_cmd: list[str], tiny_config: Path, tmp_path: Path
) -> None:
    result = _run(
        budgettune_cmd, "--engine", "torch", "--model", str(tiny_config), "--max-tokens", "8192",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2
    line = _one_error_line(result.stderr)
    assert "--max-tokens: 8192 exceeds the model's max length 4096" in line


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU preset may be found")
def test_analytic_needs_a_preset_without_a_gpu(budgettune_cmd: list[str], tmp_path: Path) -> None:
    result = _run(budgettune_cmd, "--engine", "analytic", "--model", "llama-3.1-8b", cwd=tmp_path)
    assert result.returncode == 2
    assert "--gpu-name: 'auto' found no GPU preset" in _one_error_line(result.stderr)


@pytest.mark.slow
def test_probe_timeout_midway_saves_the_partial_profile(
    budgettune_cmd: list[str], tiny_config: Path, tmp_path: Path
) -> None:
    """Small prefills take a few ms; 4096 tokens take ~0.5 s on one CPU thread, past 100 ms."""
    pytest.importorskip("torch")
    out = tmp_path / "partial.json"
    result = _run(
        budgettune_cmd,
        "--engine", "torch", "--model", str(tiny_config), "--max-tokens", "4096", "--repeats",
        "1", "--threads", "1", "--probe-timeout", "100ms", "-o", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    line = _one_error_line(result.stderr)
    assert "over --probe-timeout 0.1 s" in line and f"saved to {out}" in line
    partial = load_profile(out)
    assert not partial.complete and partial.error and "--probe-timeout" in partial.error
    sizes = [p.prompt_tokens for p in partial.probes]
    assert sizes[0] == 32 and max(sizes) <= 4096
    assert f"({len(partial.probes)} probes)" in line
    assert out.with_suffix(".csv").is_file()


def test_output_writes_the_html_report_beside_the_profile(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "runs" / "l40s.json"
    out.parent.mkdir()
    result = _run(
        budgettune_cmd,
        "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "l40s", "-o", str(out),
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    page = out.with_suffix(".html")
    # whitespace aside: the console folds a long path at any character, not only at spaces
    assert f"report:{page}" in "".join(result.stdout.split())
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lstrip().lower().startswith("<!doctype")
    assert "llama-3.1-8b" in html and "l40s" in html.lower()
    # --json names the report too; without -o (the default profiles/ name) no page is written.
    doc = json.loads(
        _run(
            budgettune_cmd,
            "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "l40s", "--json",
            cwd=tmp_path,
        ).stdout
    )  # fmt: skip
    assert doc["report"] is None
    assert not (tmp_path / doc["profile"]).with_suffix(".html").exists()
    doc = json.loads(
        _run(
            budgettune_cmd,
            "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "l40s", "--json",
            "-o", str(tmp_path / "b.json"),
            cwd=tmp_path,
        ).stdout
    )  # fmt: skip
    assert doc["report"] == str(tmp_path / "b.html") and (tmp_path / "b.html").is_file()
