"""recommendation.json, written and read here only (versioned, self-describing: enough to rebuild
the report), and the sweep's results.json, whose points carry their raw per-request records so
the report needs nothing else."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from budgettune import __version__
from budgettune.artifacts.engine_config import (
    SGLANG_CONFIG_FILE,
    SGLANG_FILE,
    TRTLLM_FILE,
    FixedSettings,
    write_engine_config,
)
from budgettune.artifacts.points import (
    flat_point_json,
    point_json,
    predicted_json,
    read_point,
    read_predicted,
)
from budgettune.artifacts.results import Results, load_results
from budgettune.core.errors import UserError
from budgettune.core.fields import Fields, check_schema, read_json_object
from budgettune.core.files import write_atomic
from budgettune.core.limits import MAX_TOKENS
from budgettune.core.units import finite_or_none
from budgettune.engines.registry import prefix_caching_default
from budgettune.tune.candidates import Candidates
from budgettune.tune.pair_grid import PairGrid, read_pair_grid
from budgettune.tune.point import Point, Predicted
from budgettune.tune.predict import Prediction
from budgettune.tune.select import Recommendation
from budgettune.tune.sweep_config import ModelSourceKind

if TYPE_CHECKING:  # the pipeline's config, read here field by field
    from budgettune.tune.sweep_config import SweepConfig

RECOMMENDATION_FILE = "recommendation.json"
SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class RunFacts:
    """How a sweep ran: engine launches and search rounds of this invocation, slots run at once
    (``parallel``), the executor ("local" or "ray"), wall time."""

    launches: int
    rounds: int
    parallel: int
    executor: str
    wall_s: float


def recommendation_document(
    config: SweepConfig,
    candidates: Candidates,
    predictions: Mapping[int, Prediction],
    points: Sequence[Point],
    recommendation: Recommendation,
    facts: RunFacts,
) -> dict[str, object]:
    """recommendation.json: versioned, self-describing, enough to rebuild the report."""
    document: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "kind": "sweep",
        "budgettune_version": __version__,
        "budget": recommendation.budget_tokens,
        "choice": {
            "budget": recommendation.budget_tokens,
            "headline": recommendation.headline,
            "reasons": list(recommendation.reasons),
            "binding_slo": recommendation.binding_slo,
        },
        "slo": {
            "tbt_ms": config.slo_tbt_s * 1e3,
            "ttft_ms": config.slo_ttft_s * 1e3,
            "percentile": config.percentile,
        },
        "load": {
            "rate_per_s": finite_or_none(config.rate_per_s),
            "asked_rate_per_s": config.asked_rate_per_s,
            "requests": config.requests,
            "traffic": config.traffic,
            "expected_cache_hit_share": finite_or_none(config.expected_hit_share, digits=4),
        },
        "engine": engine_summary(config),
        "model_source": config.model_source,
    }
    if config.model_source_kind is not None:
        document["model_source_kind"] = config.model_source_kind.value
    document.update(
        {
            "hardware": config.hardware,
            "candidates": {
                "budgets": list(candidates.budgets),
                "floor_tokens": candidates.floor_tokens,
                "ceiling_tokens": candidates.ceiling_tokens,
                "ridge_tokens": candidates.ridge_tokens,
                "knee_found": candidates.knee_found,
                "decode_batch": candidates.decode_batch,
                "align_tokens": config.align_tokens,
            },
            "predictions": {
                str(b): predicted_json(Predicted.of(p)) for b, p in sorted(predictions.items())
            },
            "points": [point_json(point) for point in points],
            "launches": facts.launches,
            "rounds": facts.rounds,
            "parallel": facts.parallel,
            "executor": facts.executor,
            "exhaustive": config.exhaustive,
            "wall_s": round(facts.wall_s, 3),
            "command": list(config.command),
            "settings": config.settings,
        }
    )
    return document


def sweep_results(
    config: SweepConfig, document: Mapping[str, object], points: Sequence[Point]
) -> Results:
    """results.json of the sweep: every point with its measured summary at the top level (the
    shape of a replay point), the prediction, the verdict, and the raw per-request records read
    back from the point's own replay results, so the report needs nothing else."""
    full_points = []
    for point in points:
        full = flat_point_json(point)
        if point.results_file:
            replay = load_results(Path(point.results_file))
            full["records"] = replay.points[0].get("records", []) if replay.points else []
        full_points.append(full)
    summary = {k: v for k, v in document.items() if k not in ("points", "settings", "command")}
    return Results(
        kind="sweep",
        config={**config.settings, "sweep": summary},
        points=full_points,
        command=list(config.command),
        engine=engine_summary(config),
        hardware=None if config.hardware is None else dict(config.hardware),
    )


def engine_summary(config: SweepConfig) -> dict[str, object]:
    """The engine a sweep ran, the reference budget, and the engine's own defaults with where
    they came from (``defaults``: absent when they were not needed or cannot be known)."""
    summary: dict[str, object] = {"name": config.engine, "default_budget": config.default_budget}
    spec = config.base_spec
    summary["prefix_caching"] = {
        # a server budgettune did not start runs as its owner set it: unknown here
        "on": spec.prefix_caching if prefix_caching_default(config.engine) else None,
        "decided_by": spec.prefix_caching_by or None,
    }
    found = config.engine_defaults
    if found is not None:
        summary["defaults"] = {
            "budget_tokens": found.budget_tokens,
            "max_num_seqs": found.max_num_seqs,
            "source": found.rule,
        }
    return summary


def write_outputs(
    run_dir: Path,
    recommendation: Recommendation,
    *,
    document: Mapping[str, object],
    engine: str,
    served_model: str | None,
    fixed: FixedSettings | None = None,
) -> dict[str, Path]:
    """recommendation.json always; when a budget was chosen, the engine config of the engine
    measured (vllm.yaml; sglang.args for SGLang, trtllm.yaml for TensorRT-LLM)."""
    files = {"recommendation": run_dir / RECOMMENDATION_FILE}
    write_atomic(files["recommendation"], json.dumps(document, indent=2, allow_nan=False) + "\n")
    if recommendation.budget_tokens is not None:
        path = write_engine_config(
            run_dir,
            engine=engine,
            budget_tokens=recommendation.budget_tokens,
            model=served_model,
            fixed=fixed,
        )
        files[{SGLANG_FILE: "sglang", TRTLLM_FILE: "trtllm"}.get(path.name, "vllm")] = path
        if path.name == SGLANG_FILE and (run_dir / SGLANG_CONFIG_FILE).is_file():
            files["sglang_config"] = run_dir / SGLANG_CONFIG_FILE  # what sglang.args reads
    return files


@dataclass(frozen=True, slots=True)
class SweepDocument:
    """What a sweep recorded about itself, read back: recommendation.json, or (``finished``
    False) a run folder's sweep.json and points.jsonl, or the summary inside the sweep's
    results.json. Figures a document does not hold are None."""

    finished: bool
    points: tuple[Point, ...]
    settings: Mapping[str, Any]
    budget: int | None = None
    headline: str | None = None
    reasons: tuple[str, ...] = ()
    slo_tbt_ms: float | None = None
    slo_ttft_ms: float | None = None
    percentile: float | None = None
    rate_per_s: float | None = None
    traffic: str | None = None
    engine_name: str | None = None
    default_budget: int | None = None
    model_source: str | None = None
    model_source_kind: ModelSourceKind | None = None
    hardware: Mapping[str, Any] = field(default_factory=dict)
    candidate_budgets: tuple[int, ...] = ()
    ridge_tokens: float | None = None
    knee_found: bool | None = None  # of the profile behind the candidates (None: no profile)
    decode_batch: float | None = None
    predictions: Mapping[int, Predicted] = field(default_factory=dict)
    launches: int | None = None
    wall_s: float | None = None
    command: tuple[str, ...] = ()
    budgettune_version: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)  # as read (app.report's profile part)
    pairs: PairGrid | None = None  # sweep --max-num-seqs A,B,C: the two-knob grid


def read_recommendation(path: Path) -> SweepDocument:
    """recommendation.json, validated: schema_version, kind "sweep", every typed field and
    point. Raises UserError naming the file and the field."""
    data = read_json_object(path, "sweep recommendation")
    where = str(path)
    check_schema(data, where, SCHEMA_VERSION)
    if data.get("kind") != "sweep":
        raise UserError(f"{where}: field 'kind': expected 'sweep', got {data.get('kind')!r}")
    fields = Fields(data, where)
    points = tuple(
        read_point(item, f"{where}: points[{index}]")
        for index, item in enumerate(fields.items("points"))
    )
    return _document(fields, points, fields.mapping_or_none("settings") or {}, finished=True)


def sweep_document_of_results(results: Results, source: Path) -> SweepDocument:
    """The sweep's own results.json: its summary (config's ``sweep``), settings (the rest of
    config) and every point, flattened with its records (the records are read elsewhere)."""
    config = dict(results.config)
    summary = config.pop("sweep", None)
    if not isinstance(summary, Mapping) or not summary:
        raise UserError(f"{source}: a sweep results file without its 'sweep' summary in config")
    where = str(source)
    points = tuple(
        read_point(item, f"{where}: points[{index}]") for index, item in enumerate(results.points)
    )
    fields = Fields(
        {
            **summary,
            "command": list(results.command),
            "budgettune_version": results.budgettune_version,
        },
        f"{where}: config.sweep",
    )
    return _document(fields, points, config, finished=True)


def finished_document(document: Mapping[str, Any], points: Sequence[Point]) -> SweepDocument:
    """A sweep that has just finished, from what it holds in memory: the document it writes as
    recommendation.json (:func:`recommendation_document`) and its typed points, read by the same
    rules as the file, without the round trip through it."""
    fields = Fields(document, "the sweep's recommendation")
    return _document(fields, tuple(points), fields.mapping_or_none("settings") or {}, finished=True)


def unfinished_document(settings: Mapping[str, Any], points: Sequence[Point]) -> SweepDocument:
    """A sweep still running or interrupted: its settings and the points finished so far."""
    return SweepDocument(finished=False, points=tuple(points), settings=settings)


def _document(
    fields: Fields, points: tuple[Point, ...], settings: Mapping[str, Any], *, finished: bool
) -> SweepDocument:
    choice = fields.child_or_none("choice")
    slo = fields.child_or_none("slo")
    load = fields.child_or_none("load")
    engine = fields.child_or_none("engine")
    candidates = fields.child_or_none("candidates")
    predictions: dict[int, Predicted] = {}
    recorded = fields.mapping_or_none("predictions") or {}
    for key, value in recorded.items():
        if not str(key).isdigit():
            continue
        predicted = (
            read_predicted(Fields.of(value, f"{fields.where}: predictions[{key}]"))
            if value is not None
            else None
        )
        if predicted is not None:
            predictions[int(key)] = predicted
    pairs = fields.child_or_none("pairs")
    source = fields.text_or_none("model_source")
    kind_text = fields.text_or_none("model_source_kind")
    try:
        kind = ModelSourceKind(kind_text) if kind_text is not None else _legacy_kind(source)
    except ValueError:
        fields.fail("model_source_kind", "profile or analytic", kind_text)
    return SweepDocument(
        finished=finished,
        points=points,
        settings=settings,
        budget=fields.integer_or_none("budget", minimum=1, maximum=MAX_TOKENS),
        headline=None if choice is None else choice.text_or_none("headline"),
        reasons=() if choice is None else choice.texts_or_empty("reasons"),
        slo_tbt_ms=None if slo is None else slo.number_or_none("tbt_ms", minimum=0),
        slo_ttft_ms=None if slo is None else slo.number_or_none("ttft_ms", minimum=0),
        percentile=None
        if slo is None
        else slo.number_or_none("percentile", minimum=0, maximum=100),
        rate_per_s=None if load is None else load.number_or_none("rate_per_s", minimum=0),
        traffic=None if load is None else load.text_or_none("traffic"),
        engine_name=None if engine is None else engine.text_or_none("name"),
        default_budget=(
            None
            if engine is None
            else engine.integer_or_none("default_budget", minimum=1, maximum=MAX_TOKENS)
        ),
        model_source=source,
        model_source_kind=kind,
        hardware=fields.mapping_or_none("hardware") or {},
        candidate_budgets=()
        if candidates is None
        else candidates.integers_or_empty("budgets", minimum=1, maximum=MAX_TOKENS),
        ridge_tokens=(
            None if candidates is None else candidates.number_or_none("ridge_tokens", minimum=0)
        ),
        knee_found=None if candidates is None else candidates.flag_or_none("knee_found"),
        decode_batch=(
            None if candidates is None else candidates.number_or_none("decode_batch", minimum=0)
        ),
        predictions=predictions,
        launches=fields.integer_or_none("launches", minimum=0),
        wall_s=fields.number_or_none("wall_s", minimum=0),
        command=fields.texts_or_empty("command"),
        budgettune_version=fields.text_or_none("budgettune_version"),
        raw=fields.data,
        pairs=None if pairs is None else read_pair_grid(pairs),
    )


def _legacy_kind(source: str | None) -> ModelSourceKind | None:
    """The kind of a document written before ``model_source_kind``: its prose named it (an
    analytic roofline's began "analytic"). Read here only, at the file boundary."""
    if not source:
        return None
    return ModelSourceKind.ANALYTIC if source.startswith("analytic") else ModelSourceKind.PROFILE
