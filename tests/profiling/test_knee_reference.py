"""The knee finder on measured GPU curves: the shipped reference prefill curves (AIConfigurator
0.12.0, data/aiconfigurator/) bend softly, and the two-segment fit reports a knee on every one,
with an interval, stable across probed ranges, above the roofline P* of the measured
calibration; before issue 15 the slope-ratio veto (0.5) called several of them "no knee"."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.fit import ShapeConstants
from budgettune.model.profile import Probe
from budgettune.model.ridge import fit_ridge
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.imported import read_iteration_csv

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "aiconfigurator"
FILES = sorted(REFERENCE.glob("*_*.csv"))


def _curve(path: Path) -> tuple[list[Probe], StepModel]:
    model_name, gpu_name = path.stem.split("_", 1)
    model = StepModel.from_hardware(resolve_model(model_name), resolve_gpu(gpu_name))
    prefill = [p for p in read_iteration_csv(path) if p.series == "prefill"]
    return prefill, model


def _knee(probes: list[Probe], model: StepModel, lo: int, hi: int, bootstrap: int = 0):
    chosen = [p for p in probes if lo <= p.prompt_tokens <= hi]
    q = ShapeConstants.of(model).attention_ratio
    return fit_ridge(chosen, attention_ratio=q, rng=np.random.default_rng(0), bootstrap=bootstrap)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_a_knee_with_an_interval_on_every_reference_curve(path: Path) -> None:
    probes, model = _curve(path)
    ridge = _knee(probes, model, 8, 8192, bootstrap=40)
    assert ridge.knee_found, ridge.reason
    assert ridge.knee_tokens is not None and ridge.p_value is not None and ridge.p_value < 1e-6
    assert ridge.ci_low_tokens is not None and ridge.ci_high_tokens is not None
    assert ridge.ci_low_tokens <= ridge.knee_tokens <= ridge.ci_high_tokens
    # where the best two lines meet lies beyond the roofline's crossing: the bend is soft
    assert model.ridge_tokens < ridge.knee_tokens < 3 * model.ridge_tokens
    # the same knee, within 15%, whatever range a profile probed (8..8192, 32..4096, 64..2048)
    for lo, hi in ((32, 4096), (64, 2048)):
        other = _knee(probes, model, lo, hi)
        assert other.knee_found, other.reason
        assert other.knee_tokens == pytest.approx(ridge.knee_tokens, rel=0.15)


def test_the_bends_are_soft_ones_the_old_veto_refused() -> None:
    """Below the knee the slope is a large share of the slope above (issue 15 measured
    0.64-0.81): with the veto at 0.5 these curves read as one straight line."""
    ratios = {}
    for path in FILES:
        probes, model = _curve(path)
        ridge = _knee(probes, model, 8, 8192)
        assert ridge.hinge_slope_below_s_per_token is not None
        assert ridge.hinge_slope_above_s_per_token is not None
        ratios[path.stem] = (
            ridge.hinge_slope_below_s_per_token / ridge.hinge_slope_above_s_per_token
        )
    assert all(0.0 < r < 0.85 for r in ratios.values()), ratios
    assert sum(r > 0.5 for r in ratios.values()) >= 5, ratios  # refused before
