"""The per-sequence CPU time of the step-time model: zero in both calibrations (the database
they are fitted to holds GPU time only), exact in step_time_s (every sequence in the batch,
prompt chunks too), recovered by the profile fit when the data carry one (a CPU's ~0.4 ms a
sequence) and left at zero when they do not."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from profile_truths import llama_on_h100

from budgettune.model.fit import ShapeConstants, fit_step_model
from budgettune.model.profile import Probe
from budgettune.model.stepmodel import StepModel

SyntheticProbes = Callable[..., list[Probe]]


def test_default_zero_and_exact_term(h100_llama: StepModel) -> None:
    assert h100_llama.overhead_per_seq_s == 0.0
    with_seq = dataclasses.replace(h100_llama, overhead_per_seq_s=4e-4)
    contexts = [300, 1200, 5000]
    base = h100_llama.iteration_time_s([(512, 0)], contexts)
    # the prompt and 3 decodes, 4 sequences x 0.4 ms on top of the roofline time
    assert with_seq.iteration_time_s([(512, 0)], contexts) == pytest.approx(base + 1.6e-3)
    assert with_seq.iteration_time_s([(512, 0)], []) == pytest.approx(
        h100_llama.iteration_time_s([(512, 0)]) + 4e-4
    )
    assert with_seq.ridge_tokens == h100_llama.ridge_tokens


@pytest.mark.parametrize("calibration", ["seed", "measured"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fit_recovers_a_per_sequence_cost(
    calibration: str, seed: int, synthetic_probes: SyntheticProbes
) -> None:
    # 20 us a sequence: at batch 256 that is 5 ms beside a ~9 ms decode step, plain to see.
    truth = dataclasses.replace(llama_on_h100(calibration), overhead_per_seq_s=20e-6)
    fit = fit_step_model(synthetic_probes(truth, seed=seed), ShapeConstants.of(truth))
    assert fit.overhead_per_seq_s == pytest.approx(20e-6, rel=0.10)
    # the soft knee lets the weight-read time trade against t0 (test_profile_fit)
    assert fit.bytes_per_s == pytest.approx(
        truth.bytes_per_s, rel=0.05 if truth.accounting == "seed" else 0.15
    )
    assert fit.flops_per_s == pytest.approx(truth.flops_per_s, rel=0.05)
    assert any("per sequence" in note for note in fit.notes)
    for err in (*fit.errors.values(), *fit.holdout.values()):
        assert err.median_rel_error < 0.03
    # Without the term the decode series could not be described as well.
    plain = llama_on_h100(calibration)
    roofline_only = fit_step_model(synthetic_probes(plain, seed=seed), ShapeConstants.of(plain))
    assert roofline_only.overhead_per_seq_s == 0.0


@pytest.mark.parametrize("calibration", ["seed", "measured"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_cost_fitted_where_there_is_none(
    calibration: str, seed: int, synthetic_probes: SyntheticProbes
) -> None:
    truth = llama_on_h100(calibration)
    fit = fit_step_model(synthetic_probes(truth, seed=seed), ShapeConstants.of(truth))
    assert fit.overhead_per_seq_s == 0.0
    if truth.accounting == "seed":
        assert fit.overhead_s == pytest.approx(truth.overhead_s, rel=0.05)
    # t0 beside the weight read: a decode's floor, pinned under either knee
    floor_s = truth.read_weight_bytes / truth.bytes_per_s + truth.overhead_s
    fitted_s = truth.read_weight_bytes / fit.bytes_per_s + fit.overhead_s
    assert fitted_s == pytest.approx(floor_s, rel=0.02)


def test_profile_round_trip_carries_the_cost_into_the_step_model(tmp_path: Path) -> None:

    from budgettune.model.profile import (
        load_profile,
        profile_step_model,
        profile_to_json,
        save_profile,
    )

    shipped = Path(__file__).resolve().parents[2] / "profiles" / "llama-3.1-8b_h100-sxm.json"
    profile = load_profile(shipped)
    assert profile.step is not None and profile.step.overhead_per_seq_s == 0.0  # older files
    step = dataclasses.replace(profile.step, overhead_per_seq_s=4e-4)
    path = tmp_path / "p.json"
    save_profile(dataclasses.replace(profile, step=step), path)
    assert profile_to_json(load_profile(path))["step"]["overhead_per_seq_s"] == 4e-4
    assert profile_step_model(load_profile(path)).overhead_per_seq_s == 4e-4
