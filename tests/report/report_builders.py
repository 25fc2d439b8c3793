"""Report test inputs built by hand: a sweep whose numbers follow a simple known law, a profile
with a knee at a known token count, a workload and a replay timeline with one known stall.

Imported by the report tests as ``report_builders`` (this folder is on sys.path under pytest's
default import mode)."""

from __future__ import annotations

import numpy as np

from budgettune.report.inputs import (
    BudgetPoint,
    Check,
    Percentiles,
    ProfileCurve,
    ProfileInput,
    Provenance,
    ReportInput,
    SweepInput,
    TileProbe,
    TimelineInput,
    TimelineRequest,
    Verdict,
    WorkloadInput,
    cdf_from_samples,
)

BUDGETS = (256, 512, 768, 1024, 1536, 2048, 4096, 8192)
SLO_TBT_MS = 50.0
SLO_TTFT_MS = 1000.0
STALL_AT_S = 3.0  # the timeline's one long gap starts in the iteration just before this
STALL_GAP_S = 0.2


def _summary(samples_ms: np.ndarray) -> Percentiles:
    keys = {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9}
    data: dict[str, object] = {k: float(np.percentile(samples_ms, q)) for k, q in keys.items()}
    data["max"] = float(samples_ms.max())
    return Percentiles.from_keys(data)


def tbt_p99_law_ms(budget: int) -> float:
    """The law the synthetic sweep follows: p99 TBT grows linearly with the budget."""
    return 10.0 + 0.02 * budget


def make_sweep(n_samples: int = 4000, seed: int = 0) -> SweepInput:
    rng = np.random.default_rng(seed)
    points = []
    for budget in BUDGETS:
        # lognormal with its p99 at the law's value (sigma 0.3: p99 = median * e^(2.326 * 0.3))
        tbt = tbt_p99_law_ms(budget) / np.exp(2.326 * 0.3) * rng.lognormal(0, 0.3, n_samples)
        ttft = 120_000.0 / budget * rng.lognormal(0, 0.5, n_samples // 10)
        measured_tbt, measured_ttft = _summary(tbt), _summary(ttft)
        p99_tbt, p99_ttft = measured_tbt.at(99), measured_ttft.at(99)
        assert p99_tbt is not None and p99_ttft is not None
        points.append(
            BudgetPoint(
                budget_tokens=budget,
                measured_tbt=measured_tbt,
                measured_ttft=measured_ttft,
                predicted_tbt=Percentiles({99.0: tbt_p99_law_ms(budget) * 0.9}),
                predicted_ttft=Percentiles({99.0: p99_ttft * 1.1}),
                throughput_tokens_per_s=4000.0 - 200_000.0 / budget,
                predicted_throughput_tokens_per_s=4100.0 - 200_000.0 / budget,
                goodput_per_s=8.0 + budget / 1024,
                completed=n_samples // 10,
                failed=3 if budget == 256 else 0,
                failure_reasons={"timeout": 3} if budget == 256 else {},
                passed=p99_tbt <= SLO_TBT_MS and p99_ttft <= SLO_TTFT_MS,
                tbt_cdf=cdf_from_samples(tbt),
                ttft_cdf=cdf_from_samples(ttft),
            )
        )
    points.append(
        BudgetPoint(budget_tokens=3072, error="engine exited with code 1 during start", failed=0)
    )
    passed = [p.budget_tokens for p in points if p.passed]
    return SweepInput(
        points=tuple(points),
        slo_tbt_ms=SLO_TBT_MS,
        slo_ttft_ms=SLO_TTFT_MS,
        rate_per_s=16.0,
        recommended_budget=max(b for b in passed if b is not None),
        engine_default_budget=8192,
    )


def make_profile() -> ProfileInput:
    tokens = np.array([64, 128, 192, 256, 384, 512, 1024, 2048, 4096, 8192], dtype=np.float64)
    knee = 256.0
    median = 5.0 + 0.02 * np.maximum(tokens, knee)
    fit_tokens = np.geomspace(64, 8192, 50)
    return ProfileInput(
        curves=(
            ProfileCurve(
                label="sim engine",
                tokens=tokens,
                median_ms=median,
                lo_ms=median * 0.97,
                hi_ms=median * 1.04,
                fit_tokens=fit_tokens,
                fit_ms=5.0 + 0.02 * np.maximum(fit_tokens, knee),
            ),
        ),
        ridge_tokens=knee,
        ridge_ci_tokens=(230.0, 280.0),
        floor_tokens=512,
        ceilings_tokens={25.0: 1000, 50.0: 2250},
        tile_probes=(TileProbe(256, 10.1, 13.3), TileProbe(512, 15.2, 15.3)),
        fit_errors={"prefill": "median 1.2%, max 4.0%"},
    )


def make_workload(n: int = 2000, seed: int = 1) -> WorkloadInput:
    rng = np.random.default_rng(seed)
    return WorkloadInput(
        prompt_tokens=np.minimum(8192, rng.lognormal(np.log(1000), 1.0, n)).astype(np.int64) + 1,
        output_tokens=rng.integers(1, 500, n).astype(np.int64),
        arrival_s=np.cumsum(rng.exponential(1 / 16.0, n)),
    )


def make_timeline(n: int = 2000, tokens_each: int = 250) -> TimelineInput:
    """Requests sent every 10 ms, one token per 20 ms iteration, one 200 ms stall at STALL_AT_S."""
    requests = []
    for i in range(n):
        sent = 0.01 * i
        times = sent + 0.05 + 0.02 * np.arange(tokens_each)
        times = np.where(times >= STALL_AT_S, times + (STALL_GAP_S - 0.02), times)
        requests.append(TimelineRequest(i, sent, times, failed=(i == 7)))
    return TimelineInput("Token timeline, budget 1024", tuple(requests), slo_tbt_ms=SLO_TBT_MS)


def make_report(model_name: str = "llama-3.1-8b") -> ReportInput:
    sweep = make_sweep()
    best = next(p for p in sweep.points if p.budget_tokens == sweep.recommended_budget)
    assert best.measured_tbt is not None and best.measured_ttft is not None
    tbt, ttft = best.measured_tbt.at(99), best.measured_ttft.at(99)
    return ReportInput(
        title=f"budgettune sweep: {model_name} on h100-sxm",
        kind="sweep",
        verdict=Verdict(
            headline=f"Recommended: {sweep.recommended_budget}",
            checks=(
                Check("p99 TBT", tbt, SLO_TBT_MS, bool(tbt is not None and tbt <= SLO_TBT_MS)),
                Check(
                    "p99 TTFT", ttft, SLO_TTFT_MS, bool(ttft is not None and ttft <= SLO_TTFT_MS)
                ),
            ),
            facts=(("model", model_name), ("load", "16 requests/s")),
            ok=True,
        ),
        profile=make_profile(),
        sweep=sweep,
        workload=make_workload(),
        timeline=make_timeline(),
        provenance=Provenance(
            command=f"budgettune sweep --model {model_name} --slo-tbt 50ms",
            versions=(("budgettune", "0.1.0"), ("python", "3.11")),
            hardware=(("gpu", "h100-sxm"),),
            trace="traces/chat.jsonl",
            trace_sha256="0" * 64,
            created="2026-11-29T16:00:00Z",
            files=(("points", "points.jsonl"), ("evil", "javascript:alert(1)")),
        ),
    )


def _sim_point(budget: int | None, tbt_p99: float | None, ttft_p99: float, failed: int = 0) -> dict:
    return {
        "budget": budget,
        "rate": 16.0,
        "ttft_ms": {
            "p50": ttft_p99 / 2,
            "p90": ttft_p99 * 0.8,
            "p99": ttft_p99,
            "p999": None,
            "max": None,
        },
        "tbt_ms": {"p50": 5.0, "p90": 8.0, "p99": tbt_p99, "p999": 60.0, "max": 70.0},
        "throughput_tokens_per_s": 3000.0,
        "completed": 100 - failed,
        "failed": failed,
    }


SIM_DOC = {
    "points": [
        _sim_point(256, 9.0, 1500.0),
        _sim_point(512, 20.0, 700.0),
        _sim_point(1024, 40.0, 400.0),
        _sim_point(2048, 60.0, 300.0),
        _sim_point(4096, None, 250.0, failed=3),
        _sim_point(None, 90.0, 350.0),
    ],
    "goodput": [{"budget": 512, "rate": 21.5}, {"budget": None, "rate": 4.0}],
}
