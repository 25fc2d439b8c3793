"""Time the profile fits on a full synthetic profile (Llama-3.1-8B on an H100, 2% noise, 5
repeats, 77 probes): the two-segment ridge fit with its 200-sample bootstrap, and the step-time
model fit (both variants, two passes, held-out refit). Prints median and range over repeats.

    python benchmarks/bench_profile_fit.py [--repeats 7] [--calibration measured|seed]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.calibration import calibration_for
from budgettune.model.fit import ShapeConstants, fit_step_model
from budgettune.model.profile import Probe
from budgettune.model.ridge import fit_ridge
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.plan import make_plan


def synthetic_probes(model: StepModel, seed: int) -> list[Probe]:
    rng = np.random.default_rng(seed)
    plan = make_plan(max_tokens=8192, max_batch=256, repeats=5)
    probes = []
    for spec in plan.probes:
        chunks = [(spec.prompt_tokens, 0)] if spec.prompt_tokens else []
        base = model.iteration_time_s(chunks, [spec.context_tokens] * spec.batch)
        times = tuple(float(t) for t in base * np.exp(rng.normal(0.0, 0.02, 5)))
        probes.append(
            Probe(spec.series, spec.prompt_tokens, spec.batch, spec.context_tokens, times, spec.tag)
        )
    return probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--calibration", default="measured", help="the truth's: measured (soft knee) or seed"
    )
    args = parser.parse_args()
    gpu = resolve_gpu("h100-sxm")
    calibration = calibration_for(args.calibration, gpu.name).with_overrides(
        overhead_s=2e-3, mode="serialized"
    )
    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), gpu, calibration=calibration)
    shape = ShapeConstants.of(model)
    ridge_s, step_s = [], []
    errors = []
    for seed in range(args.repeats):
        probes = synthetic_probes(model, seed)
        began = time.perf_counter()
        ridge = fit_ridge(
            probes, attention_ratio=shape.attention_ratio, rng=np.random.default_rng(seed)
        )
        ridge_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        step = fit_step_model(probes, shape)
        step_s.append(time.perf_counter() - began)
        floor_s = model.read_weight_bytes / model.bytes_per_s + model.overhead_s
        fitted_floor_s = model.read_weight_bytes / step.bytes_per_s + step.overhead_s
        kv = step.kv_bytes_per_s or step.bytes_per_s
        checks = [
            abs(step.flops_per_s / model.flops_per_s - 1),
            abs(kv / model.kv_streaming_bytes_per_s - 1),
            abs(fitted_floor_s / floor_s - 1),
        ]
        if model.accounting == "seed":  # a hard knee pins B, t0 and the knee apart
            checks += [
                abs(step.bytes_per_s / model.bytes_per_s - 1),
                abs(step.overhead_s / model.overhead_s - 1),
                abs((ridge.knee_tokens or 0.0) / model.ridge_tokens - 1),
            ]
        errors.append(max(checks))
    print(f"probes per profile: {len(probes)}")
    for name, values in (("ridge fit + 200 bootstrap", ridge_s), ("step-time fit", step_s)):
        print(
            f"{name:>26}: median {statistics.median(values) * 1e3:.0f} ms "
            f"(range {min(values) * 1e3:.0f}-{max(values) * 1e3:.0f} ms, {len(values)} runs)"
        )
    pinned = "F, KV bandwidth, t0 + weight read" + (
        ", B, t0 and P*" if model.accounting == "seed" else ""
    )
    print(f"{'worst parameter error':>26}: {max(errors):.1%} ({pinned} against the truth)")


if __name__ == "__main__":
    main()
