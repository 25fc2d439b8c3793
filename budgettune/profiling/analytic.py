"""`--engine analytic`: a profile computed from the GPU and model presets, measuring nothing.

Every "probe" is the roofline model's output on the standard grid and the file says so in its
``kind`` ("analytic") and ``label``; the step fit is the presets' parameters themselves, so
:func:`~budgettune.model.profile.profile_step_model` gives back ``StepModel.from_hardware``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from budgettune.core.hardware import GPU, GPU_PRESETS
from budgettune.model.fit import (
    ShapeConstants,
    model_predict_s,
    preset_figures,
    probe_work,
    series_errors,
)
from budgettune.model.profile import (
    ANALYTIC_LABEL,
    EngineInfo,
    Hardware,
    ModelInfo,
    Probe,
    Profile,
    RidgeFit,
    StepFit,
)
from budgettune.model.ridge import fit_ridge
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.plan import ProfilePlan


def prefill_knee_tokens(model: StepModel) -> float:
    """The prompt size P where a prefill turns compute-bound: (2 N_tokens P + 2 N_head +
    a P^2 / 2) / F = streamed weight bytes / B (the seed: N_tokens = N, no head term).

    Equals ``model.ridge_tokens`` but for the attention FLOPs (under 1% for 7B+ models).
    """
    a = model.attention_flops_per_pair
    two_n = 2.0 * model.per_token_params
    # FLOPs at the knee, beyond the LM head's one row
    target = model.read_weight_bytes / model.bytes_per_s * model.flops_per_s
    target -= 2.0 * model.head_params
    if a <= 0:
        return target / two_n
    return (-two_n + math.sqrt(two_n * two_n + 2.0 * a * target)) / a


def _exact_ridge(
    probes: tuple[Probe, ...], constants: ShapeConstants, model: StepModel
) -> RidgeFit:
    """The two-segment fit of the model's own output gives the linear-fit fields; the knee is
    then set to its exact value, with no interval: nothing was sampled."""
    ridge = fit_ridge(
        probes, attention_ratio=constants.attention_ratio, rng=np.random.default_rng(0), bootstrap=0
    )
    knee = prefill_knee_tokens(model)
    inside = ridge.tokens_min <= knee <= ridge.tokens_max
    return dataclasses.replace(
        ridge,
        knee_found=inside,
        knee_tokens=knee if inside else None,
        ci_low_tokens=None,
        ci_high_tokens=None,
        bootstrap_samples=0,
        reason=(
            f"model output: compute equals the weight read at {knee:.0f} tokens "
            f"(F/B from presets), not measured"
            if inside
            else f"model output: the knee ({knee:.0f} tokens) lies outside {ridge.tokens_min}.."
            f"{ridge.tokens_max}"
        ),
    )


def analytic_profile(
    *,
    model_info: ModelInfo,
    gpu: GPU,
    model: StepModel,
    tensor_parallel: int,
    plan: ProfilePlan,
    created_utc: str,
    budgettune_version: str,
    settings: dict[str, object],
    calibration: str = "measured",
) -> Profile:
    """The profile of ``model`` (built by the caller from the presets and the ``calibration``
    named) on the plan's grid."""
    probes = tuple(
        Probe(
            spec.series,
            spec.prompt_tokens,
            spec.batch,
            spec.context_tokens,
            (
                model.iteration_time_s(
                    [(spec.prompt_tokens, 0)] if spec.prompt_tokens else [],
                    [spec.context_tokens] * spec.batch,
                ),
            ),
            spec.tag,
        )
        for spec in plan.probes
    )
    constants = ShapeConstants.of(model)
    ridge = _exact_ridge(probes, constants, model)
    work = probe_work(probes, constants)
    predicted = model_predict_s(work, model)
    step = StepFit(
        flops_per_s=model.flops_per_s,
        bytes_per_s=model.bytes_per_s,
        overhead_s=model.overhead_s,
        mode=model.mode,
        mode_reason=f"the {calibration} calibration's (model output, not fitted)",
        request_overhead_s=None,
        errors=series_errors(work, predicted),
        holdout={},
        notes=("model output from presets: nothing was measured",),
        preset=preset_figures(model),
        overhead_per_seq_s=model.overhead_per_seq_s,
        kv_bytes_per_s=model.kv_bytes_per_s,
        sharpness=model.sharpness,
        accounting=model.accounting,
        comm_fixed_s=model.comm_fixed_s,
        comm_per_token_s=model.comm_per_token_s,
        unsplit_fixed_s=model.unsplit_fixed_s,
        unsplit_prefill_s=model.unsplit_prefill_s,
        unsplit_per_token_s=model.unsplit_per_token_s,
    )
    return Profile(
        kind="analytic",
        label=ANALYTIC_LABEL,
        created_utc=created_utc,
        budgettune_version=budgettune_version,
        hardware=Hardware(
            "preset",
            gpu.name,
            count=tensor_parallel,
            preset=gpu.name if gpu.name in GPU_PRESETS else None,
        ),
        engine=EngineInfo("analytic", None, dict(settings)),
        model=model_info,
        probes=probes,
        ridge=ridge,
        step=step,
    )
