"""Tensor parallelism's communication term: the all-reduce figures against the tables they are
fitted to (data/aiconfigurator/allreduce/), the step model's use of them, and `roofline`'s
report of them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.core.hardware import GPU_LINKS, GPU_PRESETS, resolve_gpu, resolve_model
from budgettune.model.allreduce import (
    MEASURED_GPU_COUNTS,
    SIBLINGS,
    allreduce_for,
    allreduces,
    fitted_allreduce_gpus,
    measured_count,
)
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.reference_fit import read_allreduce

DATA = Path(__file__).resolve().parents[1] / "data" / "aiconfigurator"
# The messages an iteration sends: one token of an 8B model's 4,096 activations up to 8,192
# tokens of a 70B model's 8,192.
SMALLEST, LARGEST = 4096, 8192 * 8192
runner = CliRunner()


@pytest.mark.parametrize("gpu", fitted_allreduce_gpus())
def test_the_fitted_figures_follow_their_table(gpu: str) -> None:
    """Each GPU count's two figures (latency, share of the link) against the table's times
    over the messages an iteration sends. vLLM's custom all-reduce switches algorithm with the
    size, which two figures cannot follow exactly; the iteration-level errors are held in
    tests/test_calibration_tp.py."""
    rows = read_allreduce(DATA)[gpu]  # (gpus, elements, seconds)
    assert {n for n, _, _ in rows} == set(MEASURED_GPU_COUNTS)
    for n in MEASURED_GPU_COUNTS:
        allreduce = allreduce_for(resolve_gpu(gpu), n)
        assert allreduce is not None
        errors = np.array(
            [allreduce.time_s(e) / seconds - 1 for g, e, seconds in rows
             if g == n and SMALLEST <= e <= LARGEST]
        )  # fmt: skip
        assert len(errors) >= 10
        assert math.sqrt(float(np.mean(errors**2))) <= 0.30, (gpu, n)


def test_one_gpu_sends_nothing() -> None:
    shape, gpu = resolve_model("llama-3.1-70b"), resolve_gpu("h100-sxm")
    assert allreduce_for(gpu, 1) is None
    one = StepModel.from_hardware(shape, gpu)
    assert one.comm_fixed_s == one.comm_per_token_s == 0.0
    assert one.comm_time_s(512, 64) == 0.0


def test_the_step_model_adds_every_layers_two_allreduces() -> None:
    shape, gpu = resolve_model("llama-3.1-70b"), resolve_gpu("h100-sxm")
    four = StepModel.from_hardware(shape, gpu, tensor_parallel=4)
    allreduce = allreduce_for(gpu, 4)
    assert allreduce is not None and allreduces(shape.layers) == 161
    tokens = 512 + 64
    expected = 161 * allreduce.time_s(tokens * shape.hidden)
    assert four.comm_time_s(512, 64) == pytest.approx(expected, rel=1e-9)
    # it adds to the pooled roofline, whatever else the iteration holds
    pooled = StepModel.from_hardware(shape, gpu, tensor_parallel=4)
    without = pooled.step_time_s(512, 512 * 256, 0, 64, 64 * 1024) - expected
    assert without > 0
    # more GPUs: a shorter iteration, of which the all-reduces are a larger part
    eight = StepModel.from_hardware(shape, gpu, tensor_parallel=8)
    args = (512, 512 * 256, 0, 64, 64 * 1024)
    assert eight.step_time_s(*args) < four.step_time_s(*args)
    share = [m.comm_time_s(512, 64) / m.step_time_s(*args) for m in (four, eight)]
    assert share[1] > share[0]


def test_gpu_counts_between_the_tables_take_the_next_one_up_and_say_so() -> None:
    assert [measured_count(n) for n in (2, 3, 4, 5, 8, 16)] == [2, 4, 4, 8, 8, 8]
    six = allreduce_for(resolve_gpu("h200"), 6)
    assert six is not None and "6 GPUs estimated from 8" in six.source


def test_every_preset_has_a_link_and_figures_saying_where_they_come_from() -> None:
    assert set(GPU_LINKS) == set(GPU_PRESETS)
    for name, gpu in GPU_PRESETS.items():
        allreduce = allreduce_for(gpu, 4)
        assert allreduce is not None and allreduce.link == GPU_LINKS[name]
        assert "AIConfigurator" in allreduce.source
        if name not in fitted_allreduce_gpus():
            assert f"estimated from its nearest sibling, {SIBLINGS[name]}'s" in allreduce.source
    # a PCIe card is slower to reach than an NVLink one
    pcie, nvlink = allreduce_for(GPU_PRESETS["l40s"], 4), allreduce_for(GPU_PRESETS["h100-sxm"], 4)
    assert pcie is not None and nvlink is not None
    assert pcie.time_s(1 << 20) > 5 * nvlink.time_s(1 << 20)


def test_roofline_reports_the_communication_time() -> None:
    args = ["roofline", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tensor-parallel", "4"]
    shown = runner.invoke(app, args)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "161 all-reduces an iteration over 4 GPUs on NVLink 4" in text
    assert "At the ridge" in text and "all-reduces" in text
    doc = json.loads(runner.invoke(app, [*args, "--json"]).output)
    assert doc["allreduce"]["gpus"] == 4 and doc["allreduce"]["per_iteration"] == 161
    assert 0.05 < doc["at_ridge"]["comm_share"] < 0.5
    iteration = json.loads(
        runner.invoke(app, [*args, "--prefill", "512", "--decodes", "64", "--context", "1024",
                            "--json"]).output
    )  # fmt: skip
    assert iteration["comm_ms"] > 0 and 0 < iteration["comm_share"] < 1
    assert iteration["step_ms"] > iteration["comm_ms"]
    one = json.loads(runner.invoke(app, ["roofline", "--prefill", "512", "--json"]).output)
    assert one["comm_ms"] == 0 and "allreduce" not in one


def test_results_json_says_where_the_allreduces_come_from(tmp_path: Path) -> None:
    """A split run on a GPU without a table of its own records its all-reduces as estimated
    from the nearest sibling, as the calibration does."""
    out = tmp_path / "sim"
    args = ["simulate", "--model", "llama-3.1-70b", "--gpu", "h100-pcie", "--requests", "40"]
    result = runner.invoke(app, [*args, "--tensor-parallel-size", "4", "--budgets", "512", "-o",
                                 str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    label = json.loads((out / "results.json").read_text())["config"]["step_model"]
    assert "all-reduces over 4 GPUs on PCIe Gen 5 x16" in label
    assert "h100-pcie not covered, estimated from its nearest sibling, l40s's share" in label
    one = tmp_path / "one"
    alone = ["simulate", "--gpu", "h100-pcie", "--requests", "40", "--budgets", "512"]
    assert runner.invoke(app, [*alone, "-o", str(one)]).exit_code == 0
    assert (
        "all-reduces" not in json.loads((one / "results.json").read_text())["config"]["step_model"]
    )


def test_the_sim_engine_and_a_sweeps_predictions_split_the_model() -> None:
    """`sweep --engine sim --tensor-parallel-size 4` starts the built-in engine on four GPUs'
    model, all-reduces included, and predicts with the same model."""
    from budgettune.app.sweep_setup import analytic_model
    from budgettune.engines.base import LaunchSpec
    from budgettune.engines.embedded.cli import config_from_args
    from budgettune.engines.embedded.engine import SimEngine
    from budgettune.engines.embedded.server import build

    spec = LaunchSpec(model="llama-3.1-70b", tensor_parallel_size=4, budget_tokens=512)
    argv = SimEngine().command(spec, 8123)
    assert argv[argv.index("--tensor-parallel-size") + 1] == "4"
    core, _, banner = build(config_from_args(argv[argv.index("--host") :]))
    assert "llama-3.1-70b on h100-sxm x 4" in banner
    expected = StepModel.from_hardware(
        resolve_model("llama-3.1-70b"), resolve_gpu("h100-sxm"), tensor_parallel=4
    )
    assert core.step_model == expected and expected.comm_per_token_s > 0
    predicted, source, _ = analytic_model(
        False, "llama-3.1-70b", "h100-sxm", "sim", tensor_parallel=4
    )
    assert predicted == expected and "llama-3.1-70b on h100-sxm x 4" in source
