"""The measured calibrations held to the shipped reference points (NVIDIA AIConfigurator 0.12.0's
silicon-measured vLLM database, data/aiconfigurator/): RMS relative error at most 12% and max at
most 25% at overhead 0, per model and GPU (issue 15); the seed calibration, which the reference
shows off by more, kept for its worked figures; the table's shape and the overrides."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from budgettune.core.errors import SpecError
from budgettune.core.hardware import GPU_PRESETS, resolve_gpu, resolve_model
from budgettune.model.calibration import (
    SEED,
    SIBLINGS,
    CalibrationChoice,
    calibration_for,
    fitted_gpus,
)
from budgettune.model.fit import model_errors
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.imported import read_iteration_csv

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator"
FILES = sorted(REFERENCE.glob("*_*.csv"))
RMS_TARGET, MAX_TARGET = 0.12, 0.25


def _errors(path: Path, calibration: str) -> np.ndarray:
    model_name, gpu_name = path.stem.split("_", 1)
    gpu = resolve_gpu(gpu_name)
    cal = calibration_for(calibration, gpu.name).with_overrides(overhead_s=0.0)  # GPU time only
    model = StepModel.from_hardware(resolve_model(model_name), gpu, calibration=cal)
    return model_errors(read_iteration_csv(path), model)


def test_the_reference_points_ship() -> None:
    names = {p.stem for p in FILES}
    # Llama-3.1-8B on every GPU the database covers, and a second shape (Qwen3-32B) on the
    # GPUs it fits (not the L40S's 48 GB).
    assert {f"llama-3.1-8b_{gpu}" for gpu in fitted_gpus()} <= names
    assert {f"qwen3-32b_{gpu}" for gpu in ("h100-sxm", "h200", "a100-80g", "b200")} <= names
    assert (REFERENCE / "README.md").is_file()
    for path in FILES:
        series = {p.series for p in read_iteration_csv(path)}
        assert series == {"prefill", "decode", "mixed"}, path.name


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_measured_calibration_meets_the_targets(path: Path) -> None:
    errors = _errors(path, "measured")
    rms, worst = math.sqrt(float(np.mean(errors**2))), float(np.max(np.abs(errors)))
    assert rms <= RMS_TARGET, f"RMS {rms:.1%}"
    assert worst <= MAX_TARGET, f"max {worst:.1%}"


@pytest.mark.parametrize("name", ["llama-3.1-8b_h100-sxm", "llama-3.1-8b_a100-80g"])
def test_the_seed_calibration_misses_them(name: str) -> None:
    """What issue 15 measured: the seed's accounting is off by ~20-30% RMS on these GPUs."""
    errors = _errors(REFERENCE / f"{name}.csv", "seed")
    assert math.sqrt(float(np.mean(errors**2))) > RMS_TARGET
    assert float(np.max(np.abs(errors))) > MAX_TARGET


def test_every_preset_has_a_measured_calibration_saying_where_it_comes_from() -> None:
    for gpu in GPU_PRESETS:
        cal = calibration_for("measured", gpu)
        assert cal.accounting == "engine" and "AIConfigurator" in cal.source
        if gpu in fitted_gpus():
            assert f"({gpu})" in cal.source
        else:  # not covered: the nearest sibling's figures, said so
            assert SIBLINGS[gpu] in fitted_gpus()
            assert (
                f"{gpu} not covered, estimated from its nearest sibling, {SIBLINGS[gpu]}'s figures"
                in cal.source
            )
    custom = calibration_for("measured", "custom")
    assert "custom not covered" in custom.source


def test_the_seed_calibration_is_the_seed_articles() -> None:
    assert calibration_for("seed", "a100-80g") == SEED
    assert (SEED.compute_efficiency, SEED.weight_bandwidth_efficiency) == (0.6, 0.8)
    assert SEED.kv_bandwidth_efficiency == 0.8 and math.isinf(SEED.sharpness)
    assert (SEED.overhead_s, SEED.mode, SEED.accounting) == (0.5e-3, "overlapped", "seed")


def test_overrides_replace_only_what_is_given_and_say_so() -> None:
    measured = calibration_for("measured", "h100-sxm")
    given = CalibrationChoice("measured", compute_efficiency=0.5, overhead_ms=2.0).resolve(
        "h100-sxm"
    )
    assert given.compute_efficiency == 0.5 and given.overhead_s == 2e-3
    assert given.weight_bandwidth_efficiency == measured.weight_bandwidth_efficiency
    assert "compute_efficiency, overhead_s as given" in given.source
    assert CalibrationChoice("measured").resolve("h100-sxm") == measured
    # the seed has one bandwidth: --bandwidth-efficiency sets the KV cache's too
    seed = CalibrationChoice("seed", bandwidth_efficiency=0.7).resolve("h100-sxm")
    assert seed.weight_bandwidth_efficiency == seed.kv_bandwidth_efficiency == 0.7
    assert dataclasses.replace(seed, source="").mode == "overlapped"


@pytest.mark.parametrize(
    ("choice", "field"),
    [
        (CalibrationChoice("fitted"), "calibration"),
        (CalibrationChoice(compute_efficiency=1.2), "compute_efficiency"),
        (CalibrationChoice(kv_bandwidth_efficiency=0.0), "kv_bandwidth_efficiency"),
        (CalibrationChoice(overhead_ms=-0.1), "overhead_ms"),
        (CalibrationChoice(mode="parallel"), "mode"),
    ],
)
def test_bad_choices_name_their_field(choice: CalibrationChoice, field: str) -> None:
    with pytest.raises(SpecError) as error:
        choice.resolve("h100-sxm")
    assert error.value.field == field


@pytest.mark.parametrize(
    "args",
    [
        ["roofline"],
        ["simulate", "--requests", "10"],
        ["profile", "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"],
        ["serve", "--port", "8125"],
        ["sweep", "--engine", "sim", "--slo-tbt", "50ms"],
    ],
    ids=lambda args: args[0],
)
def test_every_command_names_a_bad_calibration(args: list[str], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from budgettune.cli import app

    out = tmp_path / "out"
    extra = ["-o", str(out)] if args[0] in ("profile", "sweep", "simulate") else []
    result = CliRunner().invoke(app, [*args, *extra, "--calibration", "fitted"])
    assert result.exit_code == 2, result.output
    assert "--calibration: unknown calibration 'fitted'; use one of: measured, seed" in (
        result.output
    )
    assert not out.exists()  # refused before anything ran or was written
