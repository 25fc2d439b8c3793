"""`--engine aiconfigurator`: iteration times for a GPU you do not own, estimated from NVIDIA
AIConfigurator's silicon-measured kernel database (vLLM backend), as a profile's probes.

Nothing is measured here: every probe is one database estimate of GPU time (AIConfigurator
adds no CPU overhead to a step), and the profile says so (kind ``estimate``). The estimator is
AIConfigurator's Rust engine (``aiconfigurator_core.sdk.engine.EngineHandle``, 0.12.0), imported
only here and only when asked (``pip install 'budgettune[aic]'``). ``scripts/aic_reference.py``
extracts the reference points of the measured calibrations through the same functions.

How a probe maps onto AIConfigurator's calls (read from its SDK, 0.12.0):

- prefill of P tokens: ``predict_prefill_latency(1, P)``;
- b decodes at context c: ``decode_step_latency(b, isl=c, osl=1)`` (its decodes attend to
  isl + osl // 2 tokens);
- a prompt of n tokens beside b decodes at context c: AIConfigurator times a mixed step as the
  sum of the shared matrix multiplies over n + b tokens, the prompt's attention and the decodes'
  attention (``mixed_step_breakdown``); its decodes sit at the prompt's own length, so the
  decodes' attention is taken from the decode step at context c instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from budgettune.core.errors import SpecError
from budgettune.model.profile import EngineInfo, Hardware, Probe
from budgettune.profiling.plan import ProbeSpec

TESTED_VERSION = "0.12.0"
BACKEND = "vllm"
# budgettune GPU preset -> AIConfigurator system (its systems/*.yaml with a vLLM database).
SYSTEMS = {
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "a100-80g": "a100_sxm",
    "b200": "b200_sxm",
    "l40s": "l40s",
}
# budgettune model preset -> the Hugging Face id whose config AIConfigurator ships.
MODELS = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "qwen3-32b": "Qwen/Qwen3-32B",
}
ESTIMATE_LABEL = (
    "database estimate (NVIDIA AIConfigurator's silicon-measured kernel tables), GPU time "
    "only, not a measurement"
)


def _import_engine() -> tuple[Any, str]:
    """(EngineHandle class, installed version), or a one-line error naming the extra."""
    try:
        import importlib.metadata

        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError:
        raise SpecError(
            "--engine aiconfigurator needs NVIDIA AIConfigurator: pip install 'budgettune[aic]'",
            field="engine",
        ) from None
    return EngineHandle, importlib.metadata.version("aiconfigurator-core")


def aic_model_id(model: str) -> str:
    """The model AIConfigurator is given: a preset's Hugging Face id, or a model folder (one
    holding config.json, read by AIConfigurator itself). Raises SpecError on field ``model``."""
    key = model.strip().lower()
    if key in MODELS:
        return MODELS[key]
    path = Path(model)
    if path.is_file() and path.name == "config.json":
        path = path.parent
    if (path / "config.json").is_file():
        return str(path)
    raise SpecError(
        f"AIConfigurator knows the presets {', '.join(MODELS)}, or a model folder holding "
        f"config.json; got {model!r}",
        field="model",
    )


def aic_system(gpu: str) -> str:
    """AIConfigurator's system for a GPU preset. Raises SpecError on field ``gpu_name``."""
    key = gpu.strip().lower()
    if key not in SYSTEMS:
        raise SpecError(
            f"AIConfigurator's vLLM database covers {', '.join(SYSTEMS)}; got {gpu!r}",
            field="gpu_name",
        )
    return SYSTEMS[key]


@dataclass(frozen=True, slots=True)
class Estimate:
    """One iteration's estimated GPU time and the share of it from silicon-measured tables
    (the rest, norms, activations and the embedding, AIConfigurator computes by formula)."""

    seconds: float
    silicon_share: float


class AicEstimator:
    """AIConfigurator's estimator for one model on one GPU (compiled once, ~1 s)."""

    def __init__(self, model: str, gpu: str, *, tensor_parallel: int = 1) -> None:
        engine_handle, self.version = _import_engine()
        self.model_id = aic_model_id(model)
        self.system = aic_system(gpu)
        logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)  # one line per table
        try:
            self._handle = engine_handle.compile(
                self.model_id, self.system, BACKEND, tp_size=tensor_parallel
            )
        except (ValueError, RuntimeError, KeyError, OSError) as exc:
            raise SpecError(
                f"AIConfigurator cannot build {self.model_id} on {self.system}: "
                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                field="model",
            ) from None

    def iteration(self, prompt_tokens: int, batch: int, context_tokens: int) -> Estimate:
        """A prompt of ``prompt_tokens`` at offset 0 beside ``batch`` decodes at
        ``context_tokens`` (either may be absent)."""
        h = self._handle
        if batch == 0:
            context_ops, _ = h.run_static_per_op(batch_size=1, isl=prompt_tokens, osl=1)
            return Estimate(h.predict_prefill_latency(1, prompt_tokens) / 1e3, _share(context_ops))
        decode_ops = h.decode_step_per_op(batch, context_tokens, 1)
        if prompt_tokens == 0:
            ms = h.decode_step_latency(batch, context_tokens, 1)
            return Estimate(ms / 1e3, _share(decode_ops))
        shared, prompt_attention, _ = h.mixed_step_breakdown_per_op(
            prompt_tokens, batch, prompt_tokens, 1
        )
        decode_attention = [op for op in decode_ops if op[0] == "generation_attention"]
        ops = [*shared, *prompt_attention, *decode_attention]
        return Estimate(sum(op[1] for op in ops) / 1e3, _share(ops))


def _share(ops: Sequence[tuple[str, float, float, str]]) -> float:
    total = sum(op[1] for op in ops)
    return sum(op[1] for op in ops if op[3] == "silicon") / total if total > 0 else 0.0


class AicTimer:
    """An :class:`~budgettune.profiling.plan.IterationTimer` that asks the database: one
    estimate per probe (it is deterministic, so repeats would add nothing)."""

    request_overhead_series: tuple[str, ...] = ()
    kv_capacity_tokens: int | None = None  # set by the caller: probes must fit the GPU

    def __init__(self, model: str, gpu: str, *, tensor_parallel: int = 1) -> None:
        self._estimator = AicEstimator(model, gpu, tensor_parallel=tensor_parallel)
        est = self._estimator
        self.engine = EngineInfo(
            "aiconfigurator",
            est.version,
            {
                "system": est.system,
                "backend": BACKEND,
                "model": est.model_id,
                "tensor_parallel": tensor_parallel,
                "dtype": "bfloat16",
                "cpu_overhead": "none (GPU time only)",
            },
        )
        preset = gpu.strip().lower()
        self.hardware = Hardware(
            "preset", f"{preset} (AIConfigurator database)", count=tensor_parallel, preset=preset
        )

    def warm_up(self, spec: ProbeSpec) -> None:
        return None

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        est = self._estimator.iteration(spec.prompt_tokens, spec.batch, spec.context_tokens)
        return Probe(
            spec.series,
            spec.prompt_tokens,
            spec.batch,
            spec.context_tokens,
            (est.seconds,),
            spec.tag,
        )
