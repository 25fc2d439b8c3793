"""`budgettune profile`: measure iteration time against tokens, fit the ridge and the step-time
model, and print what they imply for the budget."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from budgettune.app.requests import (
    PROFILE_MAX_BATCH,
    PROFILE_MAX_TOKENS,
    ModelRequest,
    ProfileRequest,
)
from budgettune.cli import Command, app
from budgettune.cli import _engine_options as eo
from budgettune.cli import _model_options as mo
from budgettune.cli._client_options import ApiKey
from budgettune.cli._common import console, console_err, print_json, with_profiles_option
from budgettune.cli._groups import with_groups
from budgettune.core.units import format_ms
from budgettune.model.calibration import CalibrationChoice

if TYPE_CHECKING:  # the profile pipeline (numpy, the engines) loads when the command runs
    from budgettune.app.profile import BudgetSummary, ProfileOutcome
    from budgettune.model.profile import Profile, StepFit

# How `profile` measures (budgettune.app.profile.ENGINES, written out for the help: a test
# checks they agree).
ENGINES = ("vllm", "sglang", "trtllm", "sim", "torch", "analytic", "aiconfigurator")
MODEL_DEFAULTS = ModelRequest()
# The calibration group, worded for profile: the figures act on the analytic and sim measures.
_Calibration = Annotated[
    str,
    typer.Option(
        "--calibration",
        help="analytic and sim: measured (per-GPU figures fitted to AIConfigurator's "
        "silicon-measured database) or seed (the textbook roofline's); also the preset the "
        "fit is shown beside.",
    ),
]
_ComputeEfficiency = Annotated[
    float | None,
    typer.Option(
        "--compute-efficiency",
        help="analytic and sim: achievable share of peak FLOP/s (default: the calibration's).",
    ),
]
_BandwidthEfficiency = Annotated[
    float | None,
    typer.Option(
        "--bandwidth-efficiency",
        help="analytic and sim: achievable share of peak bandwidth streaming weights "
        "(default: the calibration's).",
    ),
]
_KvBandwidthEfficiency = Annotated[
    float | None,
    typer.Option(
        "--kv-bandwidth-efficiency",
        help="analytic and sim: achievable share of peak bandwidth reading the KV cache "
        "(default: the calibration's).",
    ),
]
_OverheadMs = Annotated[
    float | None,
    typer.Option(
        "--overhead-ms",
        help="analytic and sim: CPU time per iteration t0, ms (default: the calibration's).",
    ),
]
_Mode = Annotated[
    str | None,
    typer.Option(
        "--mode",
        help="analytic and sim: overlapped or serialized step-time variant (default: the "
        "calibration's).",
    ),
]
CALIBRATION = mo.CALIBRATION.worded(
    calibration=_Calibration,
    compute_efficiency=_ComputeEfficiency,
    bandwidth_efficiency=_BandwidthEfficiency,
    kv_bandwidth_efficiency=_KvBandwidthEfficiency,
    overhead_ms=_OverheadMs,
    mode=_Mode,
)


@app.command(cls=Command)
@with_groups(calibration=CALIBRATION)
def profile(
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="Model preset (llama-3.1-8b, ...), a Hugging Face config.json, or a model folder.",
        ),
    ],
    engine: Annotated[
        str | None,
        typer.Option(
            "--engine",
            help=f"How to measure: {', '.join(ENGINES)} (analytic: presets only; "
            "aiconfigurator: NVIDIA AIConfigurator's database, pip install 'budgettune[aic]'). "
            "Not with --from.",
        ),
    ] = None,
    from_csv: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Fit a profile from iteration times measured elsewhere: a CSV with columns "
            "prefill_tokens, decode_batch, context_tokens, ms (one row per timed iteration). "
            "Instead of --engine.",
        ),
    ] = None,
    gpu_name: Annotated[
        str,
        typer.Option(
            "--gpu-name",
            "--gpu",
            help="GPU label or preset; auto reads nvidia-smi (analytic needs a preset, e.g. "
            "h100-sxm).",
        ),
    ] = "auto",
    max_tokens: Annotated[
        str,
        typer.Option(
            "--max-tokens",
            help=f"Largest prefill probe, tokens (default {PROFILE_MAX_TOKENS}; '8K' = 8192, "
            "'8k' = 8000).",
        ),
    ] = str(PROFILE_MAX_TOKENS),
    repeats: Annotated[
        int,
        typer.Option("--repeats", help="Timed repeats of each probe, at most 1,000 (default 5)."),
    ] = 5,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help="Profile JSON to write (a CSV of the raw curve and an HTML report go beside "
            "it), or an existing folder to write <model>_<hardware>[_<engine>].json/.csv and "
            "report.html into. Default profiles/<model>_<hardware>[_<engine>].json, no report.",
        ),
    ] = None,
    max_batch: Annotated[
        int,
        typer.Option(
            "--max-batch",
            help="Largest decode batch probed, sequences, at most 16,384 (default "
            f"{PROFILE_MAX_BATCH}).",
        ),
    ] = PROFILE_MAX_BATCH,
    contexts: Annotated[
        str,
        typer.Option(
            "--contexts",
            help="Decode probes' context lengths, tokens, comma-separated (capped at "
            "--max-tokens).",
        ),
    ] = "256,1024,4096",
    dtype: Annotated[
        str,
        typer.Option(
            "--dtype", help="Weight dtype; auto: bfloat16 on a GPU, float32 on a CPU (torch)."
        ),
    ] = "auto",
    device: Annotated[
        str, typer.Option("--device", help="torch only: auto, cpu or cuda[:N].")
    ] = "auto",
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            help="torch on a CPU: threads (default torch's; 1 is steadier when shared).",
        ),
    ] = None,
    typical_batch: Annotated[
        int,
        typer.Option(
            "--typical-batch", help="Decodes beside a chunk for the budget figures (default 64)."
        ),
    ] = 64,
    typical_context: Annotated[
        int,
        typer.Option("--typical-context", help="Context of those decodes, tokens (default 1024)."),
    ] = 1024,
    probe_timeout: Annotated[
        str,
        typer.Option(
            "--probe-timeout", help="Stop (saving what was measured) if one probe exceeds this."
        ),
    ] = "300s",
    seed: Annotated[
        int, typer.Option("--seed", help="Seed for token ids, weights and the bootstrap.")
    ] = 0,
    time_budget: Annotated[
        str,
        typer.Option(
            "--time-budget",
            help="Seconds of probing: after the prefill series, decode and mixed probes run "
            "cheapest first and one that would end past the budget is skipped (listed in the "
            "profile). auto: 60s for vllm, sglang and trtllm when nvidia-smi lists no GPU (their "
            "CPU builds), none elsewhere; none: the whole grid; or a duration such as 2m.",
        ),
    ] = "auto",
    calibration: CalibrationChoice = MODEL_DEFAULTS.calibration,  # CALIBRATION, packed
    tensor_parallel: Annotated[
        int,
        typer.Option(
            "--tensor-parallel-size",
            "--tensor-parallel",
            help="GPUs the model is split over (analytic: pool FLOP/s and bandwidth; default 1).",
        ),
    ] = 1,
    engine_arg: eo.EngineArg = [],  # noqa: B006 (typer copies a list default)
    engine_cmd: eo.EngineCmd = None,
    env: eo.Env = [],  # noqa: B006
    health_timeout: eo.HealthTimeout = None,
    api_key: ApiKey = None,
    engine_config: Annotated[
        Path | None,
        typer.Option(
            "--engine-config",
            help="Your own engine config file (`vllm serve --config`, SGLang's --config), passed "
            "to the launch as a sweep passes it (vllm, sglang, sim): its dtype, "
            "tensor-parallel-size and memory share count as given. The probes set the budget "
            "range, max-num-seqs, max-model-len and prefix caching (off) themselves; a key a "
            "sweep refuses is refused here too.",
            rich_help_panel=eo.PANEL,
        ),
    ] = None,
    compare: Annotated[
        list[Path] | None,
        with_profiles_option(
            "With -o: another profile JSON drawn beside this one in report.html (repeatable), "
            "e.g. the torch profile of the same model."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON document, no tables.")
    ] = False,
) -> None:
    """Measure iteration time against tokens (prefill, decode, mixed), find the ridge P*,
    calibrate the step-time model and save it as a profile for `simulate --profile`.

    Measured by vllm, sglang, trtllm, sim (through their API) or torch (the model); analytic:
    presets.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from budgettune.app.profile import profile_config_of, run_profile, validate

    request = ProfileRequest(
        model=model, engine=engine, gpu_name=gpu_name, max_tokens=max_tokens, repeats=repeats,
        output=output, max_batch=max_batch, contexts=contexts, dtype=dtype, device=device,
        threads=threads, typical_batch=typical_batch, typical_context=typical_context,
        probe_timeout=probe_timeout, seed=seed, tensor_parallel=tensor_parallel,
        engine_arg=tuple(engine_arg), engine_cmd=engine_cmd,
        env=tuple(env), health_timeout=health_timeout, compare=tuple(compare or ()),
        api_key=api_key, calibration=calibration, from_csv=from_csv, time_budget=time_budget,
        engine_config=engine_config,
    )  # fmt: skip
    config = profile_config_of(request)
    validate(config)  # bad input fails here, before anything starts
    with Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        TimeElapsedColumn(),
        console=console_err,
        transient=True,
        disable=config.engine in ("analytic", "import") or not console_err.is_terminal,
    ) as bar:
        task = bar.add_task("probes", total=None)

        def on_progress(series: str, done: int, planned: int) -> None:
            bar.update(task, description=series, completed=done, total=planned)

        outcome = run_profile(config, progress=on_progress)
    report_path = _write_report(outcome, output, compare or ()) if output is not None else None
    if as_json:
        print_json({**_json_document(outcome), "report": report_path and str(report_path)})
        return
    _print_tables(outcome)
    if report_path is not None:
        console.print(f"report: {report_path}", highlight=False)


def _write_report(
    outcome: ProfileOutcome, output_dir: Path | None = None, compare: Sequence[Path] = ()
) -> Path | None:
    """With -o, the HTML report beside the profile JSON (issue 8: every -o writes its report):
    report.html in an -o folder, else the JSON's name with .html; ``compare`` drawn beside."""
    if outcome.json_path is None:
        return None
    from budgettune.app.report import run_report  # plotly loads only when a report is due

    page = outcome.json_path.with_suffix(".html")
    if output_dir is not None and output_dir.is_dir():
        page = output_dir / "report.html"
    return run_report(outcome.json_path, output=page, compare=compare).path


def _json_document(outcome: ProfileOutcome) -> dict[str, Any]:
    from budgettune.model.profile import profile_to_json

    doc = profile_to_json(outcome.profile)
    doc.pop("probes")
    summary = outcome.summary
    return {
        "profile": str(outcome.json_path),
        "curve_csv": str(outcome.csv_path),
        **doc,
        "budget": None
        if summary is None
        else {
            "knee_tokens": summary.knee_tokens,
            "floor_tokens": summary.floor_tokens,
            "floor_reason": summary.floor_reason,
            "typical_batch": summary.typical_batch,
            "typical_context": summary.typical_context,
            "model_ridge_tokens": summary.model_ridge_tokens,
            "tbt_budgets": [
                {"tbt_ms": target * 1e3, "budget_tokens": budget}
                for target, budget in summary.tbt_budgets
            ],
        },
    }


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def _title(p: Profile) -> str:
    engine = p.engine.name + (f" {p.engine.version}" if p.engine.version else "")
    extra = ", ".join(
        f"{k} {p.engine.settings[k]}" for k in ("device", "dtype") if k in p.engine.settings
    )
    hardware = p.hardware.name + (f" x{p.hardware.count}" if p.hardware.count > 1 else "")
    return f"{p.model.shape.name} on {hardware}: {engine}{f' ({extra})' if extra else ''}"


def _print_tables(outcome: ProfileOutcome) -> None:
    """The profile as the terminal shows it: the prefill curve and its ridge, the step-time
    model and its fit, the largest budget per TBT target, then what was left out and where the
    files are."""
    p = outcome.profile
    console.print(f"[bold]{_title(p)}[/bold]  [dim]{p.label}[/dim]")
    _print_ridge(outcome)
    if p.step is not None:
        _print_step_model(p)
        _print_fit_errors(p.step)
    if outcome.summary is not None:
        _print_budgets(outcome.summary)
    if p.skipped:
        console.print(
            f"[yellow]note:[/yellow] {len(p.skipped)} probe(s) left out to keep within the "
            f"{p.time_budget_s:g} s time budget (--time-budget), the largest: {p.skipped[-1]}",
            highlight=False,
        )
    took = f" in {p.elapsed_s:.1f} s" if p.elapsed_s else ""
    console.print(f"profile{took}: {outcome.json_path} (curve: {outcome.csv_path})")


def _print_ridge(outcome: ProfileOutcome) -> None:
    """The prefill curve's knee (or its absence), the fitted roofline P*, the linear fit and
    the budget floor."""
    from rich.table import Table

    ridge, summary = outcome.profile.ridge, outcome.summary
    table = Table(title="Prefill curve and ridge", title_justify="left")
    table.add_column("")
    table.add_column("value")
    if ridge is not None:
        if ridge.knee_found and ridge.knee_tokens is not None:
            ci = ""
            if ridge.ci_low_tokens is not None and ridge.ci_high_tokens is not None:
                ci = f" (95% CI {ridge.ci_low_tokens:.0f}-{ridge.ci_high_tokens:.0f})"
            table.add_row("knee (two segments)", f"{ridge.knee_tokens:.0f} tokens{ci}")
        else:
            table.add_row("knee (two segments)", "no knee in the measured range")
        table.add_row("why", ridge.reason)
        if summary is not None:
            table.add_row(
                "roofline P*",
                f"{summary.model_ridge_tokens:.0f} tokens (the fitted model: compute equals the "
                "weight read)",
            )
        intercept = format_ms(ridge.linear_intercept_s * 1e3)
        table.add_row(
            "linear fit",
            f"{intercept} + {ridge.linear_slope_s_per_token * 1e6:.3g} "
            f"µs/token (median error {ridge.linear_median_rel_error:.1%})",
        )
        for name, ratio in ridge.tile_ratios.items():
            table.add_row(f"tile {name}", f"x{ratio:.3f}")
    if summary is not None:
        floor = f"{summary.floor_tokens} tokens" if summary.floor_tokens else "-"
        table.add_row("budget floor", f"{floor} ({summary.floor_reason})")
    console.print(table)


def _print_step_model(p: Profile) -> None:
    """The step-time model's parameters beside the presets'."""
    from rich.table import Table

    step = p.step
    assert step is not None
    fit = Table(
        title=f"Step-time model ({step.accounting} accounting), {step.mode}: {step.mode_reason}",
        title_justify="left",
    )
    fitted = "profile" if p.kind == "analytic" else "fitted"
    for column in ("parameter", fitted, "preset", f"{fitted} / preset"):
        fit.add_column(column)
    preset = step.preset or {}
    kv_bw = step.kv_bytes_per_s or step.bytes_per_s
    for name, key, unit in (
        ("achievable compute F", "flops_per_s", "FLOP/s"),
        ("weight bandwidth B", "bytes_per_s", "B/s"),
        ("KV-cache bandwidth", "kv_bytes_per_s", "B/s"),
        ("CPU time t0", "overhead_s", "s"),
        ("CPU time per sequence", "overhead_per_seq_s", "s"),
    ):
        value: float = kv_bw if key == "kv_bytes_per_s" else getattr(step, key)
        ref = preset.get(key)
        text = format_ms(value * 1e3) if unit == "s" else _si(value, unit)
        ref_text = "-" if ref is None else (format_ms(ref * 1e3) if unit == "s" else _si(ref, unit))
        share = "-" if not ref else f"{value / ref:.2f}"
        fit.add_row(name, text, ref_text, share)
    sharpness = "hard max" if step.sharpness is None else f"p = {step.sharpness:.3g}"
    fit.add_row("knee sharpness", sharpness, "-", "-")
    if step.request_overhead_s is not None:
        per_token_us = (step.request_overhead_s_per_token or 0.0) * 1e6
        per_token = f" + {per_token_us:.2g} µs/token" if per_token_us >= 0.005 else ""
        fit.add_row(
            "request overhead (TTFT)",
            f"{format_ms(step.request_overhead_s * 1e3)}{per_token}",
            "-",
            "-",
        )
    console.print(fit)


def _print_fit_errors(step: StepFit) -> None:
    """How far the model is from the probes, fitted and held out, and the fit's notes."""
    from rich.table import Table

    errors = Table(title="Fit error (|model - measured| / measured)", title_justify="left")
    for column in ("series", "probes", "median", "max", "held-out median", "held-out max"):
        errors.add_column(column)
    for series, err in step.errors.items():
        held = step.holdout.get(series)
        errors.add_row(
            series,
            str(err.count),
            f"{err.median_rel_error:.1%}",
            f"{err.max_rel_error:.1%}",
            "-" if held is None else f"{held.median_rel_error:.1%}",
            "-" if held is None else f"{held.max_rel_error:.1%}",
        )
    console.print(errors)
    if step.holdout_all is not None:
        pooled = step.holdout_all
        console.print(
            f"probes held out of the fit: median error {pooled.median_rel_error:.1%}, "
            f"max {pooled.max_rel_error:.1%} over {pooled.count} probes"
        )
    for note in step.notes:
        console.print(f"[yellow]note:[/yellow] {note}")


def _print_budgets(summary: BudgetSummary) -> None:
    """The largest budget that keeps an iteration within each TBT target."""
    from rich.table import Table

    budgets = Table(
        title=f"Largest budget per TBT target ({summary.typical_batch} decodes at context "
        f"{summary.typical_context} beside one chunk)",
        title_justify="left",
    )
    budgets.add_column("TBT target")
    budgets.add_column("budget (tokens)")
    for target, budget in summary.tbt_budgets:
        budgets.add_row(format_ms(target * 1e3), "unreachable" if budget is None else str(budget))
    console.print(budgets)
