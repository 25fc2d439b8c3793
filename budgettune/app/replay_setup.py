"""From a :class:`~budgettune.app.requests.ReplayRequest` to the :class:`ReplayConfig` one replay
runs: which engine (``--engine auto``), the budget, the traffic, the launch spec, the load
generator's options, the hardware facts and the configuration results.json records, and the
SLOs to judge the run by. Printing is the caller's (``say``, ``warn``)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from budgettune.app.client import ClientSettings, client_settings, without_secrets
from budgettune.app.engine_config_file import with_engine_config
from budgettune.app.launch import (
    check_budgets_hold_seqs,
    launch_spec,
    max_num_seqs_values,
    resolve_engine,
)
from budgettune.app.outputs import RESULTS_FOLDER, claim_folder
from budgettune.app.replay import ReplayConfig
from budgettune.app.requests import (
    DEFAULT_GPU,
    DEFAULT_MODEL,
    REPLAY_REQUESTS,
    ReplayRequest,
    TrafficRequest,
)
from budgettune.app.simulate import parse_budgets
from budgettune.app.traffic import (
    Traffic,
    build_traffic,
    check_live_span,
    max_model_len_tokens,
)
from budgettune.core.auth import hide_env
from budgettune.core.errors import SpecError
from budgettune.core.hardware import HardwareFacts, resolve_gpu, resolve_model
from budgettune.core.limits import check_port
from budgettune.core.slo import SLO, check_percentile
from budgettune.engines.base import LaunchSpec
from budgettune.loadgen.runner import MERGED_MODES, RunOptions

DEFAULT_REQUESTS = REPLAY_REQUESTS  # synthetic traffic without --requests
# Synthetic traffic drawn for a closed loop without --rate: its arrival times are not used.
CLOSED_LOOP_DRAW_RATE_PER_S = 1.0


@dataclass(slots=True, frozen=True)
class PreparedReplay:
    """What the replay runs (its config and traffic) and the SLOs to judge it by (None: none
    given)."""

    config: ReplayConfig
    traffic: Traffic
    slo: SLO | None


def prepare_replay(
    request: ReplayRequest,
    *,
    command: Sequence[str],
    say: Callable[[str], None],
    warn: Callable[[str], None],
) -> PreparedReplay:
    """Validate ``request`` and decide everything one replay needs. Raises UserError
    subclasses naming the field."""
    slo_tbt_s, slo_ttft_s = request.slo.targets_s()
    slo = judged_slo(slo_tbt_s, slo_ttft_s, request.slo.percentile)
    if request.merged_chunks not in MERGED_MODES:
        raise SpecError(
            f"unknown mode {request.merged_chunks!r}; use spread or first", field="merged_chunks"
        )
    request = with_engine_config(request)
    client = client_settings(request.client)
    if request.port is not None:
        check_port(request.port, field="port")
    launch, url = request.launch, request.client.url
    model, gpu = launch.model, launch.gpu
    engine = _replay_engine(request, say)
    client = client.for_engine(engine, model)
    budget_tokens, chunked = _replay_budget(request)
    given_seqs = max_num_seqs_values(request.launch)
    if budget_tokens is not None and len(given_seqs) == 1:
        check_budgets_hold_seqs(engine, [budget_tokens], given_seqs[0], field="budget")
    traffic_request = request.traffic
    if (
        client.concurrency is not None
        and traffic_request.synthetic
        and traffic_request.rate is None
    ):
        traffic_request = dataclasses.replace(traffic_request, rate=CLOSED_LOOP_DRAW_RATE_PER_S)
    traffic = build_traffic(traffic_request, default_requests=DEFAULT_REQUESTS, on_warning=warn)
    check_live_span(traffic, traffic_request)
    warmup = request.client.warmup
    if warmup >= len(traffic.schedule):
        raise SpecError(f"{warmup} leaves none of {len(traffic.schedule)} requests", field="warmup")
    out_dir = request.output or Path("reports") / _dt.datetime.now().strftime(
        "replay-%Y%m%d-%H%M%S"
    )
    claim_folder(out_dir, RESULTS_FOLDER)
    label = "default" if request.budget is None else str(budget_tokens or "none")
    base = launch_spec(
        launch,
        engine=engine,
        model=model,
        gpu=gpu,
        url=url,
        max_model_len_tokens=max_model_len_tokens(traffic_request),
        api_key=client.api_key,
    )
    spec = dataclasses.replace(
        base,
        budget_tokens=budget_tokens,
        chunked_prefill=chunked,
        port=request.port,
        log_path=None if engine == "external" else out_dir / f"engine-{label}.log",
    )
    run = _replay_run_options(request, client, traffic_request.seed)
    t = traffic_request
    facts = hardware_facts(engine, model, gpu)
    config = ReplayConfig(
        engine=engine,
        spec=spec,
        run=run,
        traffic=client.describe(traffic.description),
        output_dir=out_dir,
        write_report=True,
        command=without_secrets(command),
        config=_replay_settings(
            request, engine, (budget_tokens, chunked), spec, t, (slo_tbt_s, slo_ttft_s), traffic,
            client,
        ),
        hardware=None if facts is None else facts.to_json(),
        rate_per_s=t.rate if client.concurrency is None else None,
    )  # fmt: skip
    return PreparedReplay(config, traffic, slo)


def _replay_run_options(request: ReplayRequest, client: ClientSettings, seed: int) -> RunOptions:
    """The client's run options, with how the replay counts merged stream chunks."""
    run = client.run_options(
        request_timeout=request.client.request_timeout,
        max_error_rate=request.max_error_rate,
        seed=seed,
        warmup=request.client.warmup,
    )
    return dataclasses.replace(run, merged_chunks=request.merged_chunks)


def _replay_settings(
    request: ReplayRequest,
    engine: str,
    budget: tuple[int | None, bool],
    spec: LaunchSpec,
    t: TrafficRequest,
    slos_s: tuple[float | None, float | None],
    traffic: Traffic,
    client: ClientSettings,
) -> dict[str, object]:
    """What results.json records of how the replay was asked for and run."""
    launch, url = request.launch, request.client.url
    model, gpu = launch.model, launch.gpu
    budget_tokens, chunked = budget
    slo_tbt_s, slo_ttft_s = slos_s
    return dict(
        engine=engine, url=url, budget=budget_tokens, chunked_prefill=chunked,
        max_num_seqs=spec.max_num_seqs, model=model, gpu=gpu, engine_cmd=launch.engine_cmd,
        env=hide_env(launch.env), engine_args=list(spec.extra_args), dtype=launch.dtype,
        tensor_parallel_size=launch.tensor_parallel_size,
        gpu_memory_utilization=launch.gpu_memory_utilization,
        prefix_caching=launch.prefix_caching, health_timeout_s=spec.health_timeout_s,
        trace=str(t.trace) if t.trace else None, format=t.format, arrivals=t.arrivals,
        rate=t.rate, burstiness=t.burstiness, time_scale=t.time_scale, window=t.window,
        requests=t.requests, duration=t.duration, max_model_len=t.max_model_len,
        on_long=t.on_long, seed=t.seed, prompt_dist=t.prompt_dist,
        output_dist=t.output_dist, warmup=request.client.warmup,
        merged_chunks=request.merged_chunks, max_error_rate=request.max_error_rate,
        request_timeout=request.client.request_timeout, slo_tbt_s=slo_tbt_s,
        slo_ttft_s=slo_ttft_s, percentile=request.slo.percentile,
        python_version=platform.python_version(),
        trace_sha256=traffic.report.sha256 if traffic.report else None,
        **client.to_json(),
    )  # fmt: skip


def _replay_engine(request: ReplayRequest, say: Callable[[str], None]) -> str:
    """The engine the replay runs on (``auto`` resolved, and said), its options checked: a
    server you run takes no budget, port or model; a launched real engine needs a model; the
    built-in engine's presets are refused here, before it would fail on them."""
    url, model = request.client.url, request.launch.model
    engine, why = resolve_engine(request.launch.engine, url, request.launch.engine_cmd)
    if request.launch.engine.strip().lower() == "auto" and url is None:
        say(why)
    if engine == "external":
        for field, value in (("budget", request.budget), ("port", request.port), ("model", model)):
            if value is not None:
                raise SpecError("not with --url (the server is already configured)", field=field)
    elif engine != "sim" and not model:
        raise SpecError(f"the {engine} engine needs a model (a folder or an id)", field="model")
    if engine == "sim":  # the launched engine would fail on them: refuse them here, at once
        resolve_model(model or DEFAULT_MODEL)
        resolve_gpu(request.launch.gpu or DEFAULT_GPU)
    return engine


def _replay_budget(request: ReplayRequest) -> tuple[int | None, bool]:
    """The one budget replayed and whether prefill is chunked: (None, True) is the engine's own
    default budget, (None, False) ``--budget none``."""
    if request.budget is None:
        return None, True
    budgets = parse_budgets(request.budget, field="budget")
    if len(budgets) != 1:
        raise SpecError(
            f"one budget per replay, got {request.budget!r} (see `sweep`)", field="budget"
        )
    return budgets[0], budgets[0] is not None


def judged_slo(tbt_s: float | None, ttft_s: float | None, percentile: float) -> SLO | None:
    """The SLOs to judge by, when at least one was given. ``SLO`` needs both targets: the one
    not given is set to infinity, so it never fails. The percentile is checked either way."""
    check_percentile(percentile)
    if tbt_s is None and ttft_s is None:
        return None
    return SLO(
        tbt_s=math.inf if tbt_s is None else tbt_s,
        ttft_s=math.inf if ttft_s is None else ttft_s,
        percentile=percentile,
    )


def hardware_facts(engine: str, model: str | None, gpu: str | None) -> HardwareFacts | None:
    """GPU and model facts known from the request (the sim engine's defaults when unset), for
    results.json; None when nothing is known (an external server's hardware never is)."""
    if engine == "external":
        return None
    if engine == "sim":
        model, gpu = model or DEFAULT_MODEL, gpu or DEFAULT_GPU
    card = resolve_gpu(gpu) if gpu is not None else None
    params = None
    if model is not None:
        try:
            shape = resolve_model(model)
            model, params = shape.name, shape.params
        except SpecError:
            pass  # a hub name the engine resolves itself: keep the name only
    if card is None and model is None:
        return None
    return HardwareFacts(gpu=card, model=model, params=params)
