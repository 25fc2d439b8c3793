"""Profile files: save/load round trip, the CSV beside, bad files, hardware description, and
analytic profiles equal to the presets' StepModel."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest

from budgettune.app.profile import ProfileConfig, run_profile
from budgettune.core.errors import SpecError
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.calibration import CalibrationChoice, calibration_for
from budgettune.model.profile import (
    SCHEMA_VERSION,
    Hardware,
    detect_hardware,
    load_profile,
    match_gpu_preset,
    profile_from_json,
    profile_step_model,
    profile_to_json,
    save_profile,
)
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.analytic import prefill_knee_tokens

REPO = Path(__file__).resolve().parents[2]


def _analytic(tmp_path: Path, **kwargs: object):
    config = ProfileConfig(
        model=str(kwargs.pop("model", "llama-3.1-8b")),
        engine="analytic",
        gpu_name=str(kwargs.pop("gpu", "h100-sxm")),
        output=tmp_path / "p.json",
        **kwargs,  # type: ignore[arg-type]
    )
    return run_profile(config)


@pytest.mark.parametrize(
    ("model", "gpu", "calibration", "mode", "tp"),
    [
        ("llama-3.1-8b", "h100-sxm", "seed", "overlapped", 1),
        ("qwen2.5-7b", "a100-80g", "measured", "overlapped", 1),
        ("llama-3.1-8b", "b200", "seed", "serialized", 1),
        ("llama-3.1-70b", "h100-sxm", "measured", None, 4),
    ],
)
def test_analytic_profile_gives_back_the_presets_step_model(
    tmp_path: Path, model: str, gpu: str, calibration: str, mode: str | None, tp: int
) -> None:
    choice = CalibrationChoice(calibration, mode=mode)
    outcome = _analytic(tmp_path, model=model, gpu=gpu, calibration=choice, tensor_parallel=tp)
    expected = StepModel.from_hardware(
        resolve_model(model), resolve_gpu(gpu), calibration=choice.resolve(gpu), tensor_parallel=tp
    )
    assert profile_step_model(outcome.profile) == expected
    # ...and so does the file written to disk.
    assert profile_step_model(load_profile(tmp_path / "p.json")) == expected
    profile = outcome.profile
    assert profile.kind == "analytic" and "not a measurement" in profile.label
    assert profile.hardware.kind == "preset" and profile.hardware.count == tp
    assert profile.ridge is not None and profile.ridge.knee_found
    assert profile.ridge.knee_tokens == pytest.approx(prefill_knee_tokens(expected))
    assert profile.ridge.knee_tokens == pytest.approx(expected.ridge_tokens, rel=0.02)
    assert profile.ridge.ci_low_tokens is None  # nothing sampled, no interval
    assert profile.step is not None
    assert all(err.max_rel_error < 1e-12 for err in profile.step.errors.values())


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    profile = _analytic(tmp_path).profile
    again = load_profile(tmp_path / "p.json")
    assert again == profile
    assert profile_from_json(json.loads(json.dumps(profile_to_json(profile)))) == profile


def test_curve_csv_beside_the_json(tmp_path: Path) -> None:
    outcome = _analytic(tmp_path, max_tokens=1024)
    assert outcome.csv_path == tmp_path / "p.csv"
    with (tmp_path / "p.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(outcome.profile.probes)
    series = {r["series"] for r in rows}
    assert series == {"prefill", "decode", "mixed"}
    assert max(int(r["prompt_tokens"]) for r in rows) == 1024
    tile = [r for r in rows if r["tag"] == "tile"]
    assert {int(r["prompt_tokens"]) for r in tile} == {257, 513}
    # Analytic: the model column is the same model that made the "measurement", and each row
    # says so.
    assert {r["source"] for r in rows} == {"model output"}
    for row in rows:
        assert float(row["model_ms"]) == pytest.approx(float(row["median_ms"]), rel=1e-5)


def test_bad_profile_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such profile file"):
        load_profile(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_profile(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"schema_version": 1, "kind": "x"}')
    with pytest.raises(SpecError, match=r"other\.json: not a budgettune profile"):
        load_profile(tmp_path / "other.json")
    profile = _analytic(tmp_path).profile
    doc = profile_to_json(profile)
    doc["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "new.json").write_text(json.dumps(doc))
    with pytest.raises(SpecError, match="newer"):
        load_profile(tmp_path / "new.json")


def test_partial_profile_has_no_step_model(tmp_path: Path) -> None:
    profile = _analytic(tmp_path).profile
    doc = profile_to_json(profile)
    doc["step"] = None
    doc["complete"] = False
    doc["error"] = "probe prefill (prompt 8192) took 400 s"
    partial = profile_from_json(doc)
    with pytest.raises(SpecError, match="partial"):
        profile_step_model(partial)
    save_profile(partial, tmp_path / "partial.json")  # the raw data still save, CSV too
    assert load_profile(tmp_path / "partial.json").error == doc["error"]
    assert (tmp_path / "partial.csv").read_text().count("\n") == len(partial.probes) + 1


@pytest.mark.parametrize(
    ("name", "preset"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-80g"),
        ("NVIDIA A100-SXM4-40GB", "a100-40g"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA RTX A6000", "a6000"),
        ("h100-sxm", "h100-sxm"),
        ("Tesla T4", None),
    ],
)
def test_gpu_names_match_presets(name: str, preset: str | None) -> None:
    assert match_gpu_preset(name) == preset


def test_hardware_on_this_machine() -> None:
    hardware = detect_hardware("auto")
    if shutil.which("nvidia-smi") is None:
        assert hardware.kind == "cpu" and hardware.name and hardware.preset is None
    else:
        assert hardware.kind == "gpu" and hardware.count >= 1
    named = detect_hardware("NVIDIA H100 80GB HBM3")
    assert named.preset == "h100-sxm"


@pytest.mark.parametrize("path", sorted((REPO / "profiles").glob("*.json")), ids=lambda p: p.name)
def test_shipped_profiles_load_and_are_labelled(path: Path) -> None:
    profile = load_profile(path)
    assert profile.kind == "analytic" and "not a measurement" in profile.label
    assert profile.hardware.preset is not None
    model = profile_step_model(profile)
    # a file written before calibrations were named holds the seed's figures
    calibration = str(profile.engine.settings.get("calibration", "seed"))
    mode = str(profile.engine.settings.get("mode", "overlapped"))
    gpu = resolve_gpu(profile.hardware.preset)
    expected = StepModel.from_hardware(
        profile.model.shape,
        gpu,
        calibration=calibration_for(calibration, gpu.name).with_overrides(mode=mode),
        tensor_parallel=profile.hardware.count,
    )
    assert model == expected
    with path.with_suffix(".csv").open() as handle:
        assert {row["source"] for row in csv.DictReader(handle)} == {"model output"}


def test_the_llama_h100_profile_ships() -> None:
    assert (REPO / "profiles" / "llama-3.1-8b_h100-sxm.json").is_file()


def test_hardware_from_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An nvidia-smi on PATH (a script standing in for the GPU's): name, driver and count are
    read from it, and a --gpu-name label keeps its driver and count."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\nrow='NVIDIA H100 80GB HBM3, 550.54.15'\nprintf '%s\\n%s\\n' \"$row\" \"$row\"\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert detect_hardware("auto") == Hardware(
        "gpu", "NVIDIA H100 80GB HBM3", count=2, driver="550.54.15", preset="h100-sxm"
    )
    assert detect_hardware("lab box 7") == Hardware(
        "gpu", "lab box 7", count=2, driver="550.54.15", preset=None
    )
