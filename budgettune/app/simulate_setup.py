"""From a :class:`~budgettune.app.requests.SimulateRequest` to what ``budgettune simulate``
runs, and its results.json: simulate's own synthetic defaults, the step-time model (presets, or
a calibrated profile), the GPU and the KV cache, the scheduler, the budgets, the SLOs, and the
words the console prints about the model. Running and printing are the caller's."""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from budgettune.app.launch import prefix_caching_choice
from budgettune.app.outputs import RESULTS_FOLDER, claim_folder
from budgettune.app.requests import (
    SIMULATE_OUTPUT_DIST,
    SIMULATE_RATE_PER_S,
    SIMULATE_REQUESTS,
    ModelRequest,
    SimulateRequest,
    flat_options,
)
from budgettune.app.simulate import Budget, SimulateReport, parse_budgets, run_simulate
from budgettune.app.step_model import calibration_of, gpu_of, step_model_of
from budgettune.app.traffic import Traffic, build_traffic
from budgettune.core.errors import SpecError
from budgettune.core.hardware import GPU, HardwareFacts
from budgettune.core.slo import SLO
from budgettune.model.allreduce import allreduce_for
from budgettune.model.stepmodel import StepModel
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.trace.schedule import Schedule
from budgettune.tune.goodput import RateProbe

DEFAULT_RATE_PER_S = SIMULATE_RATE_PER_S  # synthetic traffic without a rate
DEFAULT_REQUESTS = SIMULATE_REQUESTS
DEFAULT_OUTPUT_DIST = SIMULATE_OUTPUT_DIST


@dataclass(slots=True, frozen=True)
class PreparedSimulation:
    """Everything one ``simulate`` run needs, decided: ``targets`` are the SLOs as given (the
    report draws them), ``slo`` the same when the goodput search runs, else None; ``options``
    every option as results.json records it (the profile's model, dtype and mode replacing
    the presets' when one is used)."""

    request: SimulateRequest
    step_model: StepModel
    gpu: GPU
    tensor_parallel: int
    scheduler: SchedulerConfig
    budgets: list[Budget]
    traffic: Traffic
    start_rate_per_s: float
    targets: SLO
    slo: SLO | None
    capacity_blocks: int
    model_label: str  # e.g. "llama-3.1-8b on h100-sxm (overlapped)"
    ridge_label: str  # "ridge P* = {:.0f} tokens", or the fitted F/B without a knee
    options: dict[str, Any]

    def schedule_at(self, rate_per_s: float) -> Schedule:
        """The first schedule as built (a time-scaled trace, a window) at its own rate; the
        goodput search's other rates rescale the trace or redraw the arrivals."""
        if rate_per_s == self.start_rate_per_s:
            return self.traffic.schedule
        return self.traffic.at_rate(rate_per_s)

    def run(self, on_probe: Callable[[Budget, RateProbe], None] | None = None) -> SimulateReport:
        """Simulate every budget (and, with ``goodput``, search each one's highest rate)."""
        return run_simulate(
            step_model=self.step_model,
            scheduler=self.scheduler,
            budgets=self.budgets,
            schedule_at=self.schedule_at,
            rate_per_s=self.start_rate_per_s,
            warmup_requests=self.request.warmup,
            slo=self.slo,
            on_probe=on_probe,
            keep_detail=self.request.output is not None,
        )


def _presets_label(
    model: ModelRequest, gpu: GPU, step_model: StepModel, tensor_parallel: int
) -> str:
    """Where the presets' iteration times come from: the calibration and its source, and on
    several GPUs the all-reduces' (a GPU without figures of its own says which it borrows)."""
    calibration = calibration_of(model, gpu)
    label = (
        f"{model.model} on {gpu.name} ({step_model.mode}; calibration {calibration.name}: "
        f"{calibration.source})"
    )
    allreduce = allreduce_for(gpu, tensor_parallel)
    if allreduce is not None:
        label += (
            f"; all-reduces over {allreduce.gpus} GPUs on {allreduce.link.name}: {allreduce.source}"
        )
    return label


def prepare_simulation(
    request: SimulateRequest, *, warn: Callable[[str], None]
) -> PreparedSimulation:
    """Validate ``request`` and build what the simulation runs. Raises UserError subclasses
    naming the field."""
    options = {
        name: str(value) if isinstance(value, Path) else value
        for name, value in flat_options(request).items()
    }
    if request.output is not None:
        claim_folder(request.output, RESULTS_FOLDER)
    budgets = parse_budgets(request.budgets)
    # Parsed even without goodput, so a typo never passes silently.
    tbt_s, ttft_s = request.slo.targets_s()
    if tbt_s is None or ttft_s is None:  # simulate's options default both
        raise SpecError(
            "simulate needs both SLO targets", field="slo_tbt" if tbt_s is None else "slo_ttft"
        )
    targets = SLO(tbt_s, ttft_s)
    traffic, start_rate = _simulation_traffic(request, warn)
    model = request.model
    gpu = gpu_of(model)
    model_label = ""
    ridge_label = "ridge P* = {:.0f} tokens"
    tensor_parallel = model.tensor_parallel
    if request.profile is not None:
        from budgettune.engines.embedded.profiled import profiled_model

        # The profile's GPU preset (else the gpu) sizes the KV cache; a custom GPU is not used.
        profiled = profiled_model(request.profile, model.gpu)
        step_model, gpu = profiled.step_model, profiled.gpu
        tensor_parallel = profiled.tensor_parallel
        options.update(model=profiled.shape.name, dtype=profiled.dtype, mode=step_model.mode)
        model_label = f"{profiled.shape.name} from {profiled.description} ({step_model.mode})"
        if not profiled.knee_found:
            # F/B of the fitted model is not a knee the measurements showed: say which it is.
            ridge_label = "fitted F/B = {:.0f} tokens (the profile found no knee)"
    else:
        step_model = step_model_of(model, gpu)
        options.update(mode=step_model.mode)
        model_label = _presets_label(model, gpu, step_model, tensor_parallel)
    capacity = kv_capacity_blocks(
        step_model,
        gpu,
        gpu_memory_utilization=request.gpu_memory_utilization,
        block_size=request.block_size,
        tensor_parallel=tensor_parallel,
    )
    scheduler = SchedulerConfig(
        budget_tokens=None,
        kv_capacity_blocks=capacity,
        max_num_seqs=request.max_num_seqs,
        block_size=request.block_size,
        block_aligned_chunks=request.block_aligned,
        long_prefill_token_threshold=request.long_prefill_token_threshold,
        prefix_caching=bool(prefix_caching_choice(request.prefix_caching, "sim").on),
    )
    return PreparedSimulation(
        request=request,
        step_model=step_model,
        gpu=gpu,
        tensor_parallel=tensor_parallel,
        scheduler=scheduler,
        budgets=budgets,
        traffic=traffic,
        start_rate_per_s=start_rate,
        targets=targets,
        slo=targets if request.goodput else None,
        capacity_blocks=capacity,
        model_label=model_label,
        ridge_label=ridge_label,
        options=options,
    )


def _simulation_traffic(
    request: SimulateRequest, warn: Callable[[str], None]
) -> tuple[Traffic, float]:
    """The traffic simulated (a trace, or simulate's own synthetic defaults, not the shared
    ones) and the rate its first point runs at."""
    traffic_request = request.traffic
    if traffic_request.trace is None:
        traffic_request = replace(
            traffic_request,
            rate=DEFAULT_RATE_PER_S if traffic_request.rate is None else traffic_request.rate,
            output_dist=traffic_request.output_dist or DEFAULT_OUTPUT_DIST,
        )
    traffic = build_traffic(traffic_request, default_requests=DEFAULT_REQUESTS, on_warning=warn)
    first = traffic.schedule
    rate = traffic_request.rate
    start_rate = first.rate_per_s if rate is None else rate
    if not math.isfinite(start_rate):
        raise SpecError(
            f"{len(first)} request(s) with no time span have no arrival rate; "
            "give --arrivals poisson --rate R",
            field="trace",
        )
    return traffic, start_rate


def write_simulation(
    prepared: PreparedSimulation,
    report: SimulateReport,
    folder: Path,
    *,
    command: Sequence[str],
    as_json: bool = False,
) -> None:
    """results.json (kind "simulate") and report.html in ``folder``; ``as_json`` (how the
    command printed) is recorded beside the request's options, as results.json always had it."""
    from budgettune.app.simulate import simulate_results, write_simulate_outputs
    from budgettune.core.hardware import resolve_model

    options = {**prepared.options, "as_json": as_json}
    # With a profile the shape came from the profile file (options["model"] is its name).
    shape_name = options["model"] if options["profile"] else resolve_model(options["model"]).name
    slo, gpu, step_model = prepared.targets, prepared.gpu, prepared.step_model
    config = {
        **options,
        "traffic": prepared.traffic.description,
        "rate_per_s": prepared.start_rate_per_s,
        "requests_simulated": len(prepared.traffic.schedule),
        "slo_tbt_s": slo.tbt_s,
        "slo_ttft_s": slo.ttft_s,
        # where the iteration times come from: the presets' calibration and its source (a GPU
        # without measured data says it is estimated from its nearest sibling), or the profile
        "step_model": prepared.model_label,
        "python_version": platform.python_version(),
    }
    hardware = HardwareFacts(
        gpu=gpu, model=shape_name, params=step_model.params, ridge_tokens=step_model.ridge_tokens
    )
    results = simulate_results(
        report,
        config=config,
        command=tuple(command),
        hardware=hardware,
        trace_sha256=prepared.traffic.report.sha256 if prepared.traffic.report else None,
    )
    write_simulate_outputs(results, folder)
