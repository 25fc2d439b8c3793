"""`profile --from FILE.csv` (iteration times measured elsewhere) and `profile --engine
aiconfigurator` (AIConfigurator's database, the optional extra `[aic]`): the same schema as a
measured profile, labelled for what it is, and one-line errors for bad input."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.model.profile import load_profile, profile_step_model

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "aiconfigurator"
H100 = REFERENCE / "llama-3.1-8b_h100-sxm.csv"


def _profile(cmd: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "profile", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_from_a_reference_file(budgettune_cmd: list[str], tmp_path: Path) -> None:
    out = tmp_path / "h100.json"
    result = _profile(
        budgettune_cmd,
        "--from", str(H100), "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "-o", str(out),
        "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["kind"] == "measured" and "imported from" in doc["label"]
    assert doc["engine"]["name"] == "import" and doc["engine"]["settings"]["rows"] == 205
    assert doc["hardware"]["preset"] == "h100-sxm"
    step = doc["step"]
    assert step["accounting"] == "engine" and step["sharpness"] is not None
    # the soft curve's knee, with its interval, beside the fitted roofline's P*
    assert doc["ridge"]["knee_found"] and doc["ridge"]["ci_low_tokens"] is not None
    assert doc["budget"]["model_ridge_tokens"] < doc["ridge"]["knee_tokens"]
    for series in ("prefill", "decode", "mixed"):
        assert step["errors"][series]["median_rel_error"] < 0.08, series
    profile = load_profile(out)
    assert len(profile.probes) == 205 and profile.step is not None
    assert profile_step_model(profile).accounting == "engine"
    # the same schema as a measured profile: simulate runs on it
    sim = subprocess.run(
        [*budgettune_cmd, "simulate", "--profile", str(out), "--requests", "200", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert sim.returncode == 0, sim.stderr


def _bad(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "times.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("prefill_tokens,decode_batch,ms\n64,0,1.0\n", "times.csv:1: missing column(s) context"),
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n64,0,0,1.0\n12x,0,0,2.0\n",
            "times.csv:3: prefill_tokens must be a whole number, got '12x'",
        ),
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n64,0,0,-1\n",
            "times.csv:2: ms must be positive",
        ),
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n0,8,0,5.0\n",
            "times.csv:2: 8 decodes need their context_tokens",
        ),
        ("prefill_tokens,decode_batch,context_tokens,ms\n", "times.csv: no rows after the header"),
        # each refused before a fit: a profile of nan, or a fit of a 10^12-token row, was written
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n512,0,0,5\n512,0,0,5\n512,0,0,5\n",
            "times.csv: every row times one iteration shape; a step-time model needs at least two",
        ),
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n512,0,0,5\n0,8,512,3\n",
            "the prefill rows (decode_batch 0) time one size only (512 tokens)",
        ),
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n64,0,0,1\n1000000000000,0,0,9\n",
            "times.csv:3: prefill_tokens 1,000,000,000,000 is more than budgettune takes",
        ),
        (
            "prefill_tokens,decode_batch,context_tokens,ms\n0,2000000,64,9\n",
            "times.csv:2: decode_batch 2,000,000 is more than budgettune takes (at most 1,048,576)",
        ),
    ],
)
def test_bad_rows_are_one_line_naming_file_and_line(
    budgettune_cmd: list[str], tmp_path: Path, text: str, needle: str
) -> None:
    path = _bad(tmp_path, text)
    result = _profile(budgettune_cmd, "--from", str(path), "--model", "llama-3.1-8b", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines[0].startswith("error: --from: ") and needle in lines[0], lines
    assert len(lines) <= 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "profiles").exists()


def test_repeated_rows_are_repeats_and_series_follow_the_shape(tmp_path: Path) -> None:
    from budgettune.profiling.imported import read_iteration_csv

    path = _bad(
        tmp_path,
        "ms,prefill_tokens,decode_batch,context_tokens,gpu\n"
        "1.0,64,0,0,x\n1.2,64,0,0,x\n3.0,0,16,512,x\n4.0,256,16,512,x\n2.0,128,0,0,x\n",
    )
    probes = read_iteration_csv(path)
    assert [(p.series, p.prompt_tokens, p.batch, p.context_tokens) for p in probes] == [
        ("prefill", 64, 0, 0),
        ("decode", 0, 16, 512),
        ("mixed", 256, 16, 512),
        ("prefill", 128, 0, 0),
    ]
    assert probes[0].times_s == (1.0e-3, 1.2e-3)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--engine", "sim", "--from", str(H100)], "--from: reads iteration times measured"),
        ([], "--engine: say how to measure"),
    ],
)
def test_from_or_engine_one_of_them(
    budgettune_cmd: list[str], tmp_path: Path, args: list[str], needle: str
) -> None:
    result = _profile(budgettune_cmd, "--model", "llama-3.1-8b", *args, cwd=tmp_path)
    assert result.returncode == 2 and needle in result.stderr, result.stderr


def test_aiconfigurator_missing_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "aiconfigurator_core.sdk.engine", None)
    result = CliRunner().invoke(
        app,
        ["profile", "--engine", "aiconfigurator", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
         "-o", str(tmp_path / "p.json")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "pip install 'budgettune[aic]'" in result.output
    assert "Traceback" not in result.output


def test_aiconfigurator_covers_only_its_gpus(tmp_path: Path) -> None:
    from budgettune.core.errors import SpecError
    from budgettune.profiling.aiconfigurator import aic_model_id, aic_system

    assert aic_system("h100-sxm") == "h100_sxm" and aic_system("A100-80G") == "a100_sxm"
    with pytest.raises(SpecError, match="covers h100-sxm") as error:
        aic_system("a6000")
    assert error.value.field == "gpu_name"
    assert aic_model_id("llama-3.1-8b") == "meta-llama/Meta-Llama-3.1-8B"
    (tmp_path / "config.json").write_text("{}")
    assert aic_model_id(str(tmp_path)) == str(tmp_path)
    with pytest.raises(SpecError) as error:
        aic_model_id("mistral-7b")
    assert error.value.field == "model"


def test_aiconfigurator_profile_reproduces_the_reference(tmp_path: Path) -> None:
    """With the extra installed: a database profile of Llama-3.1-8B on the H100, labelled an
    estimate, whose probes are the shipped reference points where they meet."""
    pytest.importorskip("aiconfigurator_core", reason="the optional extra [aic] is not installed")
    from budgettune.profiling.imported import read_iteration_csv

    out = tmp_path / "aic.json"
    result = CliRunner().invoke(
        app,
        ["profile", "--engine", "aiconfigurator", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
         "-o", str(out), "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    profile = load_profile(out)
    assert profile.kind == "estimate" and "database estimate" in profile.label
    assert profile.engine.name == "aiconfigurator" and profile.engine.version == "0.12.0"
    assert profile.hardware.preset == "h100-sxm" and profile.step is not None
    assert all(len(p.times_s) == 1 for p in profile.probes)  # an estimate, not repeats
    assert profile.step.overhead_s < 1e-8  # the database holds no CPU time
    with out.with_suffix(".csv").open() as handle:
        assert {row["source"] for row in csv.DictReader(handle)} == {"database estimate"}
    reference = {
        (p.prompt_tokens, p.batch, p.context_tokens): p.median_s for p in read_iteration_csv(H100)
    }
    shared = [
        p for p in profile.probes if (p.prompt_tokens, p.batch, p.context_tokens) in reference
    ]
    assert len(shared) >= 20
    for probe in shared:
        key = (probe.prompt_tokens, probe.batch, probe.context_tokens)
        assert probe.median_s == pytest.approx(reference[key], rel=1e-4)
