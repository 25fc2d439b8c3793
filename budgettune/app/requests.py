"""What each command asks, as the user gave it: one frozen request object per command, built by
the CLI from its options and handed to one application call. Values keep the options' text
(``"50ms"``, ``"2k"``); the application validates them, naming the field on error.

Light on purpose (no numpy, no engines): the CLI imports this module to describe its options
and their defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from budgettune.core.errors import SpecError
from budgettune.core.units import parse_duration_s
from budgettune.model.calibration import DEFAULT_CALIBRATION, CalibrationChoice

DEFAULT_MODEL = "llama-3.1-8b"  # the model preset predictions and the sim engine use by default
DEFAULT_GPU = "h100-sxm"  # the GPU preset likewise
DEFAULT_PROMPT_DIST = "lognormal:mean=1000,sigma=1.0,max=8192"
DEFAULT_OUTPUT_DIST = "lognormal:mean=250,sigma=1.0,max=2048"
# Synthetic traffic without --trace, per command. sweep and replay send it live, once per budget:
# their defaults keep one replay near half a minute (240 requests at 8/s; replay 200 at the rate
# it is given) with outputs to 2048 tokens. simulate runs in virtual time, where a longer,
# heavier run costs nothing: 2000 requests at 16/s, outputs to 4096 tokens.
SWEEP_RATE_PER_S = 8.0
SWEEP_REQUESTS = 240
REPLAY_REQUESTS = 200
SIMULATE_RATE_PER_S = 16.0
SIMULATE_REQUESTS = 2000
SIMULATE_OUTPUT_DIST = "lognormal:mean=250,sigma=1.0,max=4096"
SIMULATE_BUDGETS = "256,512,1024,2048,8192,none"
# `budgettune profile`'s probe grid by default; a sweep's own profile step sizes it to the sweep
# (app/sweep.profile_config) within these.
PROFILE_MAX_TOKENS = 8192
PROFILE_MAX_BATCH = 256


@dataclass(slots=True, frozen=True)
class TrafficRequest:
    """What to send: a trace to replay (``trace`` and the options that read and re-time it) or
    synthetic Poisson/gamma traffic (``rate`` and the two length distributions)."""

    trace: Path | None = None
    format: str | None = None
    columns: str | None = None
    arrivals: str | None = None
    rate: float | None = None
    burstiness: float = 1.0
    time_scale: float = 1.0
    window: str | None = None
    requests: int | None = None
    duration: str | None = None
    max_model_len: str | None = None
    on_long: str = "error"
    strict: bool = False
    seed: int = 0
    prompt_dist: str | None = None
    output_dist: str | None = None

    @property
    def synthetic(self) -> bool:
        return self.trace is None


@dataclass(slots=True, frozen=True)
class ModelRequest:
    """The analytic step-time model: a model and a GPU preset (or a custom GPU from the three
    figures), the dtype and tensor parallelism, and the calibration group: ``measured`` or
    ``seed`` (:mod:`budgettune.model.calibration`) and the figures given instead of its own."""

    model: str = DEFAULT_MODEL
    gpu: str = DEFAULT_GPU
    peak_tflops: float | None = None
    bandwidth_tbs: float | None = None
    memory_gb: float | None = None
    dtype: str = "bfloat16"
    tensor_parallel: int = 1
    calibration: CalibrationChoice = CalibrationChoice()


@dataclass(slots=True, frozen=True)
class RooflineRequest:
    """``budgettune roofline``: one iteration (``prefill`` chunks as ``N`` or ``N@OFFSET`` and
    ``decodes`` at ``context``), or a ``prompt`` prefilled at each of ``chunk_sizes``."""

    model: ModelRequest
    prefill: tuple[str, ...]
    decodes: int
    context: int
    prompt: int | None
    chunk_sizes: str


@dataclass(slots=True, frozen=True)
class SloRequest:
    """The SLO group as given: the time-between-tokens and time-to-first-token targets
    (durations such as "50ms"; None: not given) and the percentile both constrain. The same
    names in every command that takes them and in sweep.json; each command checks the
    percentile against what it can judge."""

    slo_tbt: str | None = None
    slo_ttft: str | None = None
    percentile: float = 99.0

    def targets_s(self) -> tuple[float | None, float | None]:
        """The TBT and TTFT targets in seconds (None: not given). Raises SpecError naming the
        option whose value is not a duration."""
        return (
            None if self.slo_tbt is None else parse_duration_s(self.slo_tbt, field="slo_tbt"),
            None if self.slo_ttft is None else parse_duration_s(self.slo_ttft, field="slo_ttft"),
        )


@dataclass(slots=True, frozen=True)
class LaunchRequest:
    """The engine group, as ``sweep`` and ``replay`` take it: which engine (``auto`` decides from
    what is installed and visible), the model and GPU preset (None: the engine's or the
    predictions' default), and how to launch it. None leaves a setting at the engine's default
    (budgettune passes no flag the user did not give, but the budget under test and what the
    run must set)."""

    engine: str = "auto"
    model: str | None = None
    gpu: str | None = None
    max_num_seqs: str | None = None  # one number, or (sweep) several: tuned with the budget
    engine_cmd: str | None = None
    env: tuple[str, ...] = ()
    engine_arg: tuple[str, ...] = ()
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    prefix_caching: str = "engine"  # engine (its own default), on or off
    health_timeout: str | None = None
    engine_config: Path | None = None  # the user's `vllm serve --config` file


@dataclass(slots=True, frozen=True)
class ClientRequest:
    """How the load generator talks to the engine, beyond where: the API (``completions`` or
    ``chat``), closed-loop ``concurrency`` (None: open loop, the schedule's times), usage in
    every chunk (``continuous_usage_stats``), the API key (never recorded, never shown), and
    what completions prompts are sent as (``prompt_form``: auto, text or ids; ``tokenizer``: a
    model folder, a tokenizer.json or a cached model id to make text with). ``url``: a server
    the user runs (None: the one budgettune launches); ``request_timeout``: how long a stream
    may stall; ``warmup``: the first requests left out of the statistics."""

    url: str | None = None
    endpoint: str = "completions"
    concurrency: int | None = None
    continuous_usage_stats: bool = False
    api_key: str | None = field(default=None, repr=False)
    prompt_form: str = "auto"
    tokenizer: str | None = None
    request_timeout: str = "300s"
    warmup: int = 0


@dataclass(slots=True, frozen=True)
class ReplayRequest:
    """``budgettune replay``: one engine (launched for one budget, or ``url``), the traffic,
    the load generator's settings, and optional SLOs to judge the run by."""

    budget: str | None
    port: int | None
    launch: LaunchRequest
    traffic: TrafficRequest
    merged_chunks: str
    max_error_rate: float | None
    output: Path | None
    slo: SloRequest
    client: ClientRequest = ClientRequest()


@dataclass(slots=True, frozen=True)
class SimulateRequest:
    """``budgettune simulate``: the step-time model (presets, or a calibrated ``profile``),
    the budgets to compare, the traffic, the simulated engine's limits, and the SLOs for
    ``goodput`` and the report; ``output`` a folder for results.json and report.html."""

    model: ModelRequest
    profile: Path | None
    budgets: str
    traffic: TrafficRequest
    max_num_seqs: int
    gpu_memory_utilization: float
    block_size: int
    block_aligned: bool
    long_prefill_token_threshold: int
    warmup: int
    goodput: bool
    slo: SloRequest  # both targets given (simulate's options default them)
    output: Path | None = None
    prefix_caching: str = "engine"  # engine (the built-in engine's, as vLLM: on), on or off


@dataclass(slots=True, frozen=True)
class ProfileRequest:
    """``budgettune profile``: what to measure (``model`` through ``engine``, the presets with
    ``analytic``, AIConfigurator's database with ``aiconfigurator``, or iteration times from a
    file, ``from_csv``), the probes, the analytic/sim model's calibration and figures, how to
    launch the engine, and where to write (``output``, with ``compare`` drawn beside it in the
    report)."""

    model: str
    engine: str | None  # None: only with from_csv
    gpu_name: str
    max_tokens: str
    repeats: int
    output: Path | None
    max_batch: int
    contexts: str
    dtype: str
    device: str
    threads: int | None
    typical_batch: int
    typical_context: int
    probe_timeout: str
    seed: int
    tensor_parallel: int
    engine_arg: tuple[str, ...]
    engine_cmd: str | None
    env: tuple[str, ...]
    health_timeout: str | None
    compare: tuple[Path, ...]
    api_key: str | None = field(default=None, repr=False)
    calibration: CalibrationChoice = CalibrationChoice()
    from_csv: Path | None = None  # iteration times measured elsewhere (engine "import")
    time_budget: str = "auto"  # seconds of probing: "auto", "none" or a duration such as 60s
    engine_config: Path | None = None  # the user's own engine config file, read by every launch


@dataclass(slots=True, frozen=True)
class ReportRequest:
    """``budgettune report``: the page for ``source`` (a run folder, results.json, profile or
    simulate output), written to ``output``, judged against optional SLOs, with ``compare``
    profiles drawn beside a profile's curve."""

    source: Path
    output: Path | None
    slo: SloRequest
    compare: tuple[Path, ...]


@dataclass(slots=True, frozen=True)
class ServeRequest:
    """``budgettune serve``: the simulated engine to serve (``budget`` and ``max_model_len`` as
    text; ``budget`` None: the engine-default rule on ``gpu``), and where to listen."""

    engine: str
    budget: str | None
    max_num_seqs: int | None
    model: str
    gpu: str
    dtype: str
    profile: Path | None
    max_model_len: str | None
    gpu_memory_utilization: float
    block_size: int
    long_prefill_token_threshold: int
    host: str
    port: int
    served_model_name: str | None
    stream_interval: int
    time_scale: float
    emission_log: Path | None
    api_key: str | None = field(default=None, repr=False)  # None or empty: no key required
    calibration: CalibrationChoice = CalibrationChoice()
    tensor_parallel: int = 1
    prefix_caching: str = "engine"  # engine (vLLM's default: on), on or off


_PATHS = frozenset({"trace", "profile", "output", "resume", "engine_config"})
# The option groups a request may hold, by the name of their type (a field's annotation).
_GROUPS = {
    kind.__name__: kind
    for kind in (
        SloRequest, LaunchRequest, TrafficRequest, ModelRequest, ClientRequest, CalibrationChoice
    )
}  # fmt: skip


def flat_options(request: Any) -> dict[str, Any]:
    """Every option of a request by its name, flat (a group's fields, and its own groups',
    beside the command's own), JSON-ready but for paths: what sweep.json and results.json
    record."""
    flat = {}
    for option in fields(request):
        value = getattr(request, option.name)
        if option.type in _GROUPS:
            flat.update(flat_options(value))
        else:
            flat[option.name] = _plain(value)
    return flat


@dataclass(slots=True, frozen=True)
class SweepRequest:
    """``budgettune sweep``: the SLOs, the engine, the traffic and the search, as given.
    ``profile`` is a path or the word ``analytic``; ``resume`` a run folder to continue."""

    slo: SloRequest
    profile: Path | None
    launch: LaunchRequest
    traffic: TrafficRequest
    budgets: str | None
    align: int
    goodput: bool
    baseline: str
    exhaustive: bool
    max_error_rate: float | None
    output: Path | None = None
    resume: Path | None = None
    client: ClientRequest = ClientRequest()
    max_replays: int = 3
    parallel: int | None = None  # verifications at once (None: one per GPU set, or 1)
    gpus: str | None = None  # "0,1,2,3": the GPUs slots are made of (None: what nvidia-smi lists)
    ray: str | None = None  # a Ray cluster to run on: an address, "auto" or "local"
    calibration: str = DEFAULT_CALIBRATION  # of the analytic predictions and the sim engine

    def options(self) -> dict[str, Any]:
        """Every option by its name, flat (the groups' fields beside the sweep's own), as
        sweep.json saves them for ``--resume``; lists for JSON, paths kept as paths."""
        return flat_options(self)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SweepRequest:
        """The request from :meth:`options`' flat names (a saved sweep's, restored); names it
        does not know are ignored, paths and lists come back as Path and tuple. A sweep saved
        before calibrations were named (issue 15) ran on the seed's. Raises SpecError naming the
        option whose saved value is not of its type (``"requests": "x"``, ``true`` for a
        count): a hand-edited sweep.json is refused, not run."""
        values = {name: _typed(name, value) for name, value in options.items()}
        values.setdefault("calibration", "seed")
        own: dict[str, Any] = {}
        for option in fields(cls):
            kind = _GROUPS.get(str(option.type))
            if kind is not None:
                inner = {}
                for inner_field in fields(kind):
                    if inner_field.name in values:
                        value = values[inner_field.name]
                        _check_type(inner_field.name, str(inner_field.type), value)
                        inner[inner_field.name] = value
                own[option.name] = kind(**inner)
            elif option.name in values:
                _check_type(option.name, str(option.type), values[option.name])
                own[option.name] = values[option.name]
        return cls(**own)


_TYPE_CHECKS: dict[str, Callable[[object], bool]] = {
    "None": lambda v: v is None,
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v == v,
    "str": lambda v: isinstance(v, str),
    "bool": lambda v: isinstance(v, bool),
    "Path": lambda v: isinstance(v, Path),
    "tuple[str, ...]": lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v),
}


def _check_type(name: str, annotation: str, value: Any) -> None:
    """Refuse a restored option whose value is not of its annotated type (SpecError)."""
    kinds = [part.strip() for part in annotation.split("|")]
    known = [kind for kind in kinds if kind in _TYPE_CHECKS]
    if len(known) != len(kinds):  # a type this check does not know (the client group's)
        return
    if not any(_TYPE_CHECKS[kind](value) for kind in kinds):
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        raise SpecError(f"saved as {shown}, not a {annotation.replace('None', 'null')}",
                        field=name)  # fmt: skip


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _typed(name: str, value: Any) -> Any:
    if name in _PATHS and value is not None and not isinstance(value, Path):
        return Path(value)
    if name == "max_num_seqs" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # saved as a number before it could name several
    return tuple(value) if isinstance(value, list) else value
