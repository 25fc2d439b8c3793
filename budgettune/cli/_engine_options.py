"""The engine group ``sweep`` and ``replay`` share (one :class:`OptionGroup` packed into a
:class:`~budgettune.app.requests.LaunchRequest`: which engine, the model and GPU, and how to
launch it), and the ``--engine``/``--model``/``--gpu``/``--url`` option types other commands
word for themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from budgettune.app.requests import DEFAULT_GPU, DEFAULT_MODEL, LaunchRequest
from budgettune.cli._groups import OptionGroup

PANEL = "Engine"
# The engines budgettune knows (budgettune.engines.registry's names, written out so that the
# help costs no import of the engines; a test checks they agree).
ENGINE_NAMES = ("sim", "external", "vllm", "sglang", "trtllm")

Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        help="Measure a server you run (engine external): nothing is launched.",
        rich_help_panel=PANEL,
    ),
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Model to serve: a folder or Hugging Face id for vLLM/SGLang; for sim a preset or "
        f"config.json (default {DEFAULT_MODEL}).",
        rich_help_panel=PANEL,
    ),
]


def gpu_option(help: str) -> Any:
    """``--gpu`` with the command's own wording (``{gpu}`` in ``help`` names the default)."""
    return typer.Option("--gpu", help=help.format(gpu=DEFAULT_GPU), rich_help_panel=PANEL)


Engine = Annotated[
    str,
    typer.Option(
        "--engine",
        help="auto (vLLM when installed and a GPU is visible, else sim), vllm, sglang, trtllm, "
        "sim (built in) or external (with --url).",
        rich_help_panel=PANEL,
    ),
]
Gpu = Annotated[str | None, gpu_option("GPU preset for the sim engine (default {gpu}).")]

MaxNumSeqs = Annotated[
    str | None,
    typer.Option(
        "--max-num-seqs",
        help="Most running sequences (vLLM --max-num-seqs, SGLang --max-running-requests), at "
        "most 1,048,576; passed to the engine only when given (default: the engine's own).",
        rich_help_panel=PANEL,
    ),
]
# sweep's wording: several values make it a second knob, searched with the budget
SweepMaxNumSeqs = Annotated[
    str | None,
    typer.Option(
        "--max-num-seqs",
        help="Most running sequences (vLLM --max-num-seqs, SGLang --max-running-requests), at "
        "most 1,048,576; passed to the engine only when given (default: the engine's own). "
        "Several, e.g. 4,16,64: tuned with the budget (the largest budget that meets both "
        "SLOs at some value, then the largest value that meets both at it); auto: the values "
        "tuned are powers of two from half to four times the expected decode batch, and the "
        "engine's own limit.",
        rich_help_panel=PANEL,
    ),
]

EngineCmd = Annotated[
    str | None,
    typer.Option(
        "--engine-cmd",
        help="How to start the engine when it is not the default `vllm serve` / "
        "`python -m sglang.launch_server`, e.g. '/opt/venv/bin/python -m "
        "vllm.entrypoints.openai.api_server' (split like a shell, never run through one).",
        rich_help_panel=PANEL,
    ),
]

Env = Annotated[
    list[str],
    typer.Option(
        "--env",
        help="KEY=VALUE set for the engine process only. Repeatable.",
        rich_help_panel=PANEL,
    ),
]

EngineArg = Annotated[
    list[str],
    typer.Option(
        "--engine-arg",
        help="Extra engine flags passed through, e.g. --engine-arg '--enforce-eager'. Repeatable.",
        rich_help_panel=PANEL,
    ),
]

Dtype = Annotated[
    str | None,
    typer.Option(
        "--dtype",
        help="Engine dtype (e.g. float32 for vLLM on a CPU).",
        rich_help_panel=PANEL,
    ),
]

TensorParallelSize = Annotated[
    int | None,
    typer.Option("--tensor-parallel-size", min=1, help="GPUs per engine.", rich_help_panel=PANEL),
]

GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        help="Share of GPU memory the engine may use, 0-1 (engine default 0.9).",
        rich_help_panel=PANEL,
    ),
]

PrefixCaching = Annotated[
    str,
    typer.Option(
        "--prefix-caching",
        help="engine (default: as the engine ships, on for vLLM, SGLang, TensorRT-LLM and the "
        "built-in engine), on or off. Every replay sends prompts no other replay shares, so "
        "hits come only from the traffic's own shared prefixes.",
        rich_help_panel=PANEL,
    ),
]

EngineConfig = Annotated[
    Path | None,
    typer.Option(
        "--engine-config",
        help="Your own engine config YAML (`vllm serve --config`, SGLang's --config), passed "
        "whole to every launch (vLLM, SGLang, and the built-in engine, which reads the keys it "
        "models); the settings budgettune models in it (model, max-num-seqs, max-model-len, "
        "tensor parallelism, the memory share, dtype, prefix caching) count as given, and the "
        "written vllm.yaml (SGLang: sglang.yaml) is this file with the budget set. A key "
        "budgettune sets (the budget) or also given as a flag is refused.",
        rich_help_panel=PANEL,
    ),
]

HealthTimeout = Annotated[
    str | None,
    typer.Option(
        "--health-timeout",
        help="How long to wait for the engine to become healthy (default 20m for "
        "vLLM/SGLang, 2m for sim).",
        rich_help_panel=PANEL,
    ),
]

LAUNCH = OptionGroup(
    LaunchRequest,
    {
        "engine": Engine,
        "model": Model,
        "gpu": Gpu,
        "max_num_seqs": MaxNumSeqs,
        "engine_cmd": EngineCmd,
        "env": Env,
        "engine_arg": EngineArg,
        "dtype": Dtype,
        "tensor_parallel_size": TensorParallelSize,
        "gpu_memory_utilization": GpuMemoryUtilization,
        "prefix_caching": PrefixCaching,
        "health_timeout": HealthTimeout,
        "engine_config": EngineConfig,
    },
)
