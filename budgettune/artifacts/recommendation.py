"""What a sweep writes about itself: recommendation.json (versioned, self-describing) and the
sweep's results.json, whose points carry their raw per-request records so the report needs
nothing else."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgettune import __version__
from budgettune.artifacts.engine_config import FixedSettings, write_engine_configs
from budgettune.artifacts.results import Results, load_results
from budgettune.tune.candidates import Candidates
from budgettune.tune.predict import Prediction
from budgettune.tune.select import Recommendation

if TYPE_CHECKING:  # the pipeline's config, read here field by field
    from budgettune.tune.sweep_config import SweepConfig


def ms_or_none(value_s: float) -> float | None:
    return value_s * 1e3 if value_s == value_s and value_s != float("inf") else None


def prediction_json(prediction: Prediction | None) -> dict[str, Any] | None:
    """The simulator's summary (percentile objects, like a measured point) plus the TBT and TTFT
    at the sweep's SLO percentile (``*_at_slo_ms``) and the mean decode batch."""
    if prediction is None:
        return None
    return {
        **prediction.summary.to_json(),
        "tbt_at_slo_ms": ms_or_none(prediction.tbt_s),
        "ttft_at_slo_ms": ms_or_none(prediction.ttft_s),
        "decode_batch": prediction.decode_batch,
    }


def recommendation_document(
    config: SweepConfig,
    candidates: Candidates,
    predictions: dict[int, Prediction],
    points: list[dict[str, Any]],
    recommendation: Recommendation,
    launches: int,
    wall_s: float,
) -> dict[str, Any]:
    """recommendation.json: versioned, self-describing, enough to rebuild the report."""
    return {
        "schema_version": 1,
        "kind": "sweep",
        "budgettune_version": __version__,
        "budget": recommendation.budget_tokens,
        "choice": recommendation.to_json(),
        "slo": {
            "tbt_ms": config.slo_tbt_s * 1e3,
            "ttft_ms": config.slo_ttft_s * 1e3,
            "percentile": config.percentile,
        },
        "load": {
            "rate_per_s": config.rate_per_s,
            "asked_rate_per_s": config.asked_rate_per_s,
            "requests": config.requests,
            "traffic": config.traffic,
        },
        "engine": {"name": config.engine, "default_budget": config.default_budget},
        "model_source": config.model_source,
        "hardware": config.hardware,
        "candidates": {
            "budgets": list(candidates.budgets),
            "floor_tokens": candidates.floor_tokens,
            "ceiling_tokens": candidates.ceiling_tokens,
            "ridge_tokens": candidates.ridge_tokens,
            "decode_batch": candidates.decode_batch,
            "align_tokens": config.align_tokens,
        },
        "predictions": {str(b): prediction_json(p) for b, p in sorted(predictions.items())},
        "points": points,
        "launches": launches,
        "exhaustive": config.exhaustive,
        "wall_s": round(wall_s, 3),
        "command": list(config.command),
        "settings": config.settings,
    }


def sweep_results(
    config: SweepConfig, document: dict[str, Any], points: list[dict[str, Any]]
) -> Results:
    """results.json of the sweep: every point with its measured summary at the top level (the
    shape of a replay point), the prediction, the verdict, and the raw per-request records read
    back from the point's own replay results, so the report needs nothing else."""
    full_points = []
    for point in points:
        full = {**point, **(point.get("measured") or {})}
        full.pop("measured", None)
        replay_file = point.get("results_file")
        if replay_file:
            replay = load_results(Path(replay_file))
            full["records"] = replay.points[0].get("records", []) if replay.points else []
        full_points.append(full)
    summary = {k: v for k, v in document.items() if k not in ("points", "settings", "command")}
    return Results(
        kind="sweep",
        config={**config.settings, "sweep": summary},
        points=full_points,
        command=list(config.command),
        engine={"name": config.engine, "default_budget": config.default_budget},
        hardware=config.hardware,
    )


def write_outputs(
    run_dir: Path,
    recommendation: Recommendation,
    *,
    document: dict[str, Any],
    max_num_seqs: int,
    served_model: str | None,
    fixed: FixedSettings | None = None,
) -> dict[str, Path]:
    """recommendation.json always; vllm.yaml and sglang.args when a budget was chosen."""
    files = {"recommendation": run_dir / "recommendation.json"}
    files["recommendation"].write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
    if recommendation.budget_tokens is not None:
        vllm_path, sglang_path = write_engine_configs(
            run_dir,
            budget_tokens=recommendation.budget_tokens,
            max_num_seqs=max_num_seqs,
            model=served_model,
            fixed=fixed,
        )
        files["vllm"] = vllm_path
        files["sglang"] = sglang_path
    return files
