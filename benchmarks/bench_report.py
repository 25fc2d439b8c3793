"""Benchmark: the HTML report of a 2,000-request sweep over 8 budgets: page size (total, and what
is left beside the embedded plotly.js) and the time to build it, median and range over repeats.

The records come from the built-in simulator (llama-3.1-8b on h100-sxm, lognormal prompts mean
1,000 and outputs mean 250, Poisson at 16 requests/s), one run per budget, so the page holds the
same amount of raw data a live 2,000-request sweep would. Target (issue 8): a few MB at most.

    .venv/bin/python benchmarks/bench_report.py [--requests 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from plotly.offline import get_plotlyjs

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.stepmodel import StepModel
from budgettune.report.html import write_report
from budgettune.report.inputs import ReportInput, SweepInput
from budgettune.report.sources import (
    Slo,
    measured_point,
    timeline_from_records,
    workload_from_records,
)
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.schedule import synthetic_schedule

BUDGETS = (256, 512, 768, 1024, 1536, 2048, 4096, 8192)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    gpu = resolve_gpu("h100-sxm")
    model = StepModel.from_hardware(resolve_model("llama-3.1-8b"), gpu)
    schedule = synthetic_schedule(
        prompt_dist=parse_length_dist("lognormal:mean=1000,sigma=1.0,max=8192"),
        output_dist=parse_length_dist("lognormal:mean=250,sigma=1.0,max=4096"),
        rate_per_s=16.0,
        requests=args.requests,
        seed=0,
    )
    blocks = kv_capacity_blocks(model, gpu)
    slo = Slo(tbt_ms=50.0, ttft_ms=1000.0)
    runs = {
        b: simulate(schedule, model, SchedulerConfig(b, kv_capacity_blocks=blocks)).records
        for b in BUDGETS
    }
    tokens = sum(len(r.token_times_s) for r in runs[BUDGETS[0]])
    print(f"{args.requests} requests x {len(BUDGETS)} budgets, {tokens:,} output tokens per run")

    build_s: list[float] = []
    size = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.html"
        for _ in range(args.repeats):
            start = time.perf_counter()
            points = tuple(
                measured_point(runs[b], budget_tokens=b, summary=None, slo=slo) for b in BUDGETS
            )
            passing = [p.budget_tokens for p in points if p.passed and p.budget_tokens]
            report = ReportInput(
                title="bench",
                kind="sweep",
                sweep=SweepInput(
                    points=points,
                    slo_tbt_ms=slo.tbt_ms,
                    slo_ttft_ms=slo.ttft_ms,
                    recommended_budget=max(passing) if passing else None,
                    engine_default_budget=8192,
                ),
                workload=workload_from_records(runs[1024]),
                timeline=timeline_from_records(runs[1024], "timeline, budget 1024", slo.tbt_ms),
            )
            page = write_report(report, path)
            build_s.append(time.perf_counter() - start)
            size = path.stat().st_size
    plotly_bytes = len(get_plotlyjs().encode())
    print(f"charts: {len(page.chart_ids)} ({', '.join(page.chart_ids)})")
    print(
        f"page size: {size / 1e6:.2f} MB in all; plotly.js {plotly_bytes / 1e6:.2f} MB; "
        f"everything else {(size - plotly_bytes) / 1e3:.0f} kB"
    )
    print(
        f"build time (adapters + figures + page + write), {args.repeats} repeats: median "
        f"{statistics.median(build_s):.2f} s, range {min(build_s):.2f}-{max(build_s):.2f} s"
    )


if __name__ == "__main__":
    main()
