"""What one sweep is asked and how it runs, validated by the caller: SLOs, engine, traffic,
step-time model, candidates, the run folder."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from budgettune.core.engine_defaults import DefaultBudget
from budgettune.core.slo import SLO
from budgettune.engines.base import LaunchSpec
from budgettune.loadgen.runner import RunOptions
from budgettune.model.stepmodel import StepModel
from budgettune.sim.scheduler import SchedulerConfig


class ModelSourceKind(StrEnum):
    """Where the predictions' step-time model came from, as a field beside its prose."""

    PROFILE = "profile"  # a calibrated profile (given, or measured first)
    ANALYTIC = "analytic"  # the analytic roofline of presets, not measured


@dataclass(frozen=True, slots=True)
class SweepConfig:
    """Everything one sweep needs, validated by the caller."""

    slo_tbt_s: float
    slo_ttft_s: float
    percentile: float  # e.g. 99.0
    engine: str
    base_spec: LaunchSpec
    run: RunOptions
    step_model: StepModel
    model_source: str  # where the step-time model came from, in words, for the report
    scheduler: SchedulerConfig  # the prediction's scheduler (budget replaced per candidate)
    traffic: str
    rate_per_s: float  # the schedule's realised rate
    run_dir: Path
    budgets: tuple[int, ...] | None = None  # None: derive candidates from the model
    align_tokens: int = 256
    default_budget: int | None = None  # the "what you run today" line (engine default or given)
    baseline_label: str = "Your engine default"
    # The engine's own defaults and where they came from (asked, or budgettune's table); None:
    # not needed (a baseline and --max-num-seqs given) or unknowable (a running server).
    engine_defaults: DefaultBudget | None = None
    goodput: bool = False
    exhaustive: bool = False  # verify every candidate in full (the grid peers run), no search
    # Replays a budget may get, the first counted: more while its verdict is marginal or the
    # load generator was unhealthy (app/verify.py).
    max_replays: int = 3
    resume: bool = False
    settings: Mapping[str, object] = field(default_factory=dict)  # recorded as given
    command: tuple[str, ...] = ()
    hardware: Mapping[str, object] | None = None
    served_model: str | None = None  # the model path/name for the written engine configs
    asked_rate_per_s: float | None = None  # --rate (the realised rate of a short schedule differs)
    requests: int | None = None  # requests in the schedule
    # The traffic's own sharing: prompt tokens a prefix cache with unbounded space would find
    # cached (None: the traffic records no shared prefixes)
    expected_hit_share: float | None = None
    # The user's --engine-config text as the launches read it (a credential hidden): the
    # written vllm.yaml is it with the answer set; None without one
    engine_config_text: str | None = None
    # The kind of model_source; None: the caller did not say (the report adds no note).
    model_source_kind: ModelSourceKind | None = None
    # Whether the profile behind step_model found a knee; None: no profile (the roofline).
    knee_found: bool | None = None
    # --max-num-seqs values tuned with the budget, ascending (empty: one value or the engine's,
    # the budget alone is tuned, unless max_num_seqs_auto: the sweep picks them from its plan)
    max_num_seqs_values: tuple[int, ...] = ()
    max_num_seqs_auto: bool = False

    @property
    def tunes_max_num_seqs(self) -> bool:
        """Whether max-num-seqs is tuned with the budget (the two-knob sweep)."""
        return bool(self.max_num_seqs_values) or self.max_num_seqs_auto

    @property
    def quantile(self) -> float:
        return self.percentile / 100.0

    @property
    def slo(self) -> SLO:
        """The SLOs every verdict of this sweep is judged against."""
        return SLO(tbt_s=self.slo_tbt_s, ttft_s=self.slo_ttft_s, percentile=self.percentile)
