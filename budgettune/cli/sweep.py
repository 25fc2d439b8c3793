"""`budgettune sweep`: the main job. Candidates from the step-time model, live verification of
as few of them as the interval search needs, the verdict, and the engine configs.

The shell: options -> :class:`SweepRequest` (restored from the run folder with ``--resume``) ->
:func:`budgettune.app.sweep_setup.prepare_sweep` and the sweep -> the table or the JSON."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import _click

from budgettune.app.requests import (
    ClientRequest,
    LaunchRequest,
    SloRequest,
    SweepRequest,
    TrafficRequest,
)
from budgettune.cli import Command, app
from budgettune.cli import _engine_options as eo
from budgettune.cli._client_options import CLIENT
from budgettune.cli._common import PERCENTILE_HELP
from budgettune.cli._groups import with_groups
from budgettune.cli._trace_options import TRAFFIC
from budgettune.core.errors import UserError
from budgettune.model.calibration import DEFAULT_CALIBRATION

SLO_PANEL = "SLOs"
SEARCH_PANEL = "Search"
NO_FEASIBLE_BUDGET_EXIT = 3
ParameterSource = _click.core.ParameterSource

SloTbt = Annotated[str | None, typer.Option(
    "--slo-tbt", "--slo-itl", help="p99 time-between-tokens target, TBT (ITL, inter-token "
    "latency), e.g. 50ms (required, except with --resume, which reads it from the run folder).",
    rich_help_panel=SLO_PANEL,
)]  # fmt: skip
SloTtft = Annotated[str, typer.Option(
    "--slo-ttft", help="p99 time-to-first-token target.", rich_help_panel=SLO_PANEL
)]  # fmt: skip
Percentile = Annotated[float, typer.Option(
    "--percentile", help=PERCENTILE_HELP, rich_help_panel=SLO_PANEL,
)]  # fmt: skip
Gpu = Annotated[
    str | None, eo.gpu_option("GPU preset for predictions and the sim engine (default {gpu}).")
]
Profile = Annotated[Path | None, typer.Option(
    "--profile", help="A profile from `budgettune profile` (calibrated step-time model). "
    "Without one, vllm, sglang and trtllm run the profile step first (saved as "
    "<run>/profile.json; --resume reuses it); sim and external predict with the analytic "
    "roofline of --model on --gpu. 'analytic' uses that roofline and skips the profile step.",
    rich_help_panel=eo.PANEL,
)]  # fmt: skip
Calibration = Annotated[str, typer.Option(
    "--calibration", help="Calibration of the analytic roofline (sim and external, or "
    "--profile analytic) and of the sim engine: measured (per-GPU figures fitted to NVIDIA "
    "AIConfigurator's silicon-measured vLLM database) or seed (the textbook roofline's).",
    rich_help_panel=eo.PANEL,
)]  # fmt: skip
Budgets = Annotated[str | None, typer.Option(
    "--budgets", help="Candidate budgets, tokens, comma-separated, each at most 16,777,216 "
    "(default: multiples of --align from the ridge floor to the TBT ceiling, plus one step "
    "above). Not with --url: a server you run is measured at its own budget.",
    rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Align = Annotated[int, typer.Option(
    "--align", help="Candidates are multiples of this many tokens (a multiple of the KV block "
    "size, 16).", rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Goodput = Annotated[bool, typer.Option(
    "--goodput", help="Also find each verified budget's highest rate (requests/s) meeting both "
    "SLOs, one engine launch per budget.", rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Baseline = Annotated[str, typer.Option(
    "--baseline", help="The budget you run today, measured as the reference line: auto (the "
    "engine's own default: the installed vLLM is asked; SGLang's follows GPU memory), a number "
    "of tokens, or none to skip it. With --url: the budget the server runs (auto: read from "
    "its /server_info, as vLLM answers with VLLM_SERVER_DEV_MODE=1).",
    rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Exhaustive = Annotated[bool, typer.Option(
    "--exhaustive", help="Verify every candidate in full, without the search or early stop "
    "(the grid other tools run; for comparison).", rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
MaxReplays = Annotated[int, typer.Option(
    "--max-replays", min=1, help="Replays a budget may get, the first counted: a budget whose "
    "p99 holds an SLO inside its 95% interval (a marginal verdict), or measured while the load "
    "generator lagged, is replayed again on the same engine with fresh arrivals, and the "
    "replays are pooled.", rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Warmup = Annotated[int, typer.Option(
    "--warmup", min=0, help="Leave the first N requests of each replay out of the statistics.",
    rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
RequestTimeout = Annotated[str, typer.Option(
    "--request-timeout", help="Fail a request whose stream stalls this long.",
    rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
MaxErrorRate = Annotated[float | None, typer.Option(
    "--max-error-rate", help="Abort a replay once more than this share (0-1) of finished "
    "requests failed.", rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Output = Annotated[Path | None, typer.Option(
    "--output", "-o", help="Run folder (default reports/sweep-<date-time>).",
    rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
Resume = Annotated[Path | None, typer.Option(
    "--resume", help="Continue the sweep in this run folder with the options it was started "
    "with (options given again must match, except --engine-cmd, --env and the timeouts); "
    "finished budgets are not re-run.", rich_help_panel=SEARCH_PANEL,
)]  # fmt: skip
SCALE_PANEL = "Many GPUs and clusters"
Parallel = Annotated[int | None, typer.Option(
    "--parallel", min=1, help="Verify up to N budgets at once, one per slot (default: one slot "
    "per --tensor-parallel-size GPUs on vLLM and SGLang; 1 on the built-in engine, which takes "
    "any N; 1 with --ray unless given). Each slot's load generator is a process of its own.",
    rich_help_panel=SCALE_PANEL,
)]  # fmt: skip
Gpus = Annotated[str | None, typer.Option(
    "--gpus", help="GPUs the slots are made of, e.g. 0,1,2,3 (default: every GPU nvidia-smi "
    "lists); each engine starts with its slot's in CUDA_VISIBLE_DEVICES.",
    rich_help_panel=SCALE_PANEL,
)]  # fmt: skip
Ray = Annotated[str | None, typer.Option(
    "--ray", help="Run the verifications as Ray tasks: a cluster address, auto (RAY_ADDRESS) or "
    "local (a Ray instance of its own on this machine). Needs budgettune\\[ray].",
    rich_help_panel=SCALE_PANEL,
)]  # fmt: skip
AsJson = Annotated[bool, typer.Option("--json", help="Print recommendation.json to stdout.")]


@app.command(cls=Command)
@with_groups(
    launch=eo.LAUNCH.worded(gpu=Gpu, max_num_seqs=eo.SweepMaxNumSeqs),
    traffic=TRAFFIC,
    client=CLIENT.worded(request_timeout=RequestTimeout, warmup=Warmup),
)
def sweep(
    ctx: typer.Context,
    slo_tbt: SloTbt = None,
    slo_ttft: SloTtft = "1s",
    percentile: Percentile = 99.0,
    launch: LaunchRequest = LaunchRequest(),  # the eo.LAUNCH options, packed by with_groups
    profile: Profile = None,
    calibration: Calibration = DEFAULT_CALIBRATION,
    traffic: TrafficRequest = TrafficRequest(),  # the TRAFFIC options, likewise
    client: ClientRequest = ClientRequest(),  # the CLIENT options, likewise
    budgets: Budgets = None,
    align: Align = 256,
    goodput: Goodput = False,
    baseline: Baseline = "auto",
    exhaustive: Exhaustive = False,
    max_replays: MaxReplays = 3,
    parallel: Parallel = None,
    gpus: Gpus = None,
    ray: Ray = None,
    max_error_rate: MaxErrorRate = 0.5,
    output: Output = None,
    resume: Resume = None,
    as_json: AsJson = False,
) -> None:
    """Recommend the largest token budget whose p99 TBT and TTFT meet your SLOs, verified live.

    Candidates come from the step-time model (ridge floor to TBT ceiling); the simulator
    predicts each; the engine is launched and your traffic replayed only for the budgets the
    interval search needs. Writes recommendation.json and vllm.yaml (sglang.args for SGLang).
    Exit code 0 with a recommendation, 3 when no budget meets both SLOs, 2 for a mistake in
    the input, 1 when no budget could be measured (every engine failed) or the disk is full.
    `--resume DIR` alone continues the sweep in DIR with the options it was started with.
    """
    from budgettune.app.sweep_setup import prepare_sweep, resumed_request
    from budgettune.cli._common import console_err, print_json, print_warning
    from budgettune.cli._sweep_display import (
        print_result,
        profile_with_progress,
        run_with_progress,
    )

    request = SweepRequest(
        slo=SloRequest(slo_tbt, slo_ttft, percentile), profile=profile, launch=launch,
        traffic=traffic, budgets=budgets, align=align, goodput=goodput, baseline=baseline,
        exhaustive=exhaustive, max_error_rate=max_error_rate, output=output,
        resume=resume, client=client, max_replays=max_replays, parallel=parallel, gpus=gpus,
        ray=ray, calibration=calibration,
    )  # fmt: skip
    given: list[str] = []
    flags = {param.name: max(param.opts, key=len) for param in ctx.command.params if param.name}

    def say(line: str) -> None:
        console_err.print(line, highlight=False)

    try:
        if resume is not None:
            given = [
                name
                for name in request.options()
                if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
            ]
            request = resumed_request(request, given, flags)
        prepared = prepare_sweep(
            request,
            command=("budgettune", *sys.argv[1:]),
            say=say,
            warn=print_warning,
            profile_step=profile_with_progress,
        )
    except UserError as error:
        field = error.field
        if resume is None or field is None or field in given or field not in flags:
            raise
        # An option the user did not type came from the run folder: blame the file.
        raise UserError(
            f"{resume / 'sweep.json'}: the saved {flags[field]}: {error.message}",
            hint=error.hint
            or "this run's sweep.json was changed or is damaged; start a new sweep with -o",
        ) from None
    from budgettune.app.sweep_setup import executor_for

    executor = executor_for(prepared)
    try:
        result = run_with_progress(prepared, executor)
    except KeyboardInterrupt:
        run_dir = prepared.config.run_dir
        console_err.print(
            f"every finished point is kept in {run_dir}: `budgettune sweep --resume {run_dir}` "
            "goes on from there",
            highlight=False,
            soft_wrap=True,
        )
        raise
    finally:
        executor.close()
    if as_json:
        print_json(result.document)
    else:
        print_result(result, prepared.config)
    failed = result.engine_failure
    if failed is not None:  # nothing was measured: an engine failure, not a verdict
        from budgettune.core.errors import EngineError

        raise EngineError(
            f"no budget was measured: every engine failed ({len(result.points)} launch(es)); "
            f"budget {failed.budget}: {failed.error or failed.status.text}",
            log_tail=failed.log_tail or "",
        )
    if result.recommendation.budget_tokens is None:
        raise typer.Exit(NO_FEASIBLE_BUDGET_EXIT)
