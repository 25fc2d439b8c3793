"""Benchmark: how fast the simulator runs (issue 2's targets), medians and ranges over repeats.

  A  One (budget, rate) point: 2,000 requests (lognormal prompts mean 1,000, outputs mean 250),
     16 req/s Poisson, llama-3.1-8b on h100-sxm, for each budget of 256..8192 and none.
     Target: under 0.3 s on one core. Timed: simulate() alone, and with summarize().
  B  `simulate --goodput` over six budgets (SLO 50 ms p99 TBT, 1 s p99 TTFT, from 16 req/s).
     Target: under 15 s.

CPU time (time.process_time) is the figure to compare with the targets on a shared machine;
wall time is printed beside it. ``--pin`` runs on CPU 0 only.

    .venv/bin/python benchmarks/bench_simulator.py [--repeats 7] [--pin] [--only A,B]
        [--calibration measured|seed]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from budgettune.app.simulate import parse_budgets, run_simulate
from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.core.metrics import summarize
from budgettune.core.slo import SLO
from budgettune.model.stepmodel import StepModel
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.schedule import Schedule, synthetic_schedule

GPU = resolve_gpu("h100-sxm")
# --calibration picks another (the default: measured, as the commands default to)
MODEL = StepModel.from_hardware(resolve_model("llama-3.1-8b"), GPU)
CAPACITY = kv_capacity_blocks(MODEL, GPU)
BUDGETS = parse_budgets("256,512,1024,2048,8192,none")
PROMPTS = parse_length_dist("lognormal:mean=1000,sigma=1.0,max=8192")
OUTPUTS = parse_length_dist("lognormal:mean=250,sigma=1.0,max=4096", field="output_dist")


def schedule_at(rate_per_s: float) -> Schedule:
    return synthetic_schedule(
        prompt_dist=PROMPTS, output_dist=OUTPUTS, rate_per_s=rate_per_s, requests=2000, seed=0
    )


def timed(fn: Callable[[], object], repeats: int) -> tuple[list[float], list[float]]:
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return cpu, wall


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):7.3f} s  [{min(values):.3f}-{max(values):.3f}]"


def bench_point(repeats: int) -> None:
    schedule = schedule_at(16.0)
    print("A  one point, 2,000 requests at 16 req/s (target < 0.3 s CPU)")
    print(f"   {'budget':>6}  {'iters':>6}  {'simulate, CPU median [range]':>30}  "
          f"{'+ summarize, CPU':>28}  {'wall median':>11}")  # fmt: skip
    for budget in BUDGETS:
        config = SchedulerConfig(budget_tokens=budget, kv_capacity_blocks=CAPACITY)
        result = simulate(schedule, MODEL, config)  # warm-up, and the iteration count
        cpu, wall = timed(lambda config=config: simulate(schedule, MODEL, config), repeats)
        cpu_all, _ = timed(
            lambda config=config: summarize(simulate(schedule, MODEL, config).records), repeats
        )
        label = "none" if budget is None else str(budget)
        print(f"   {label:>6}  {result.iterations:>6}  {fmt(cpu):>30}  {fmt(cpu_all):>28}  "
              f"{statistics.median(wall):9.3f} s")  # fmt: skip


def bench_goodput(repeats: int) -> None:
    print("B  --goodput over six budgets, SLO p99 TBT 50 ms / TTFT 1 s (target < 15 s)")
    base = SchedulerConfig(budget_tokens=None, kv_capacity_blocks=CAPACITY)
    probes: list[int] = []

    def run() -> None:
        report = run_simulate(
            step_model=MODEL,
            scheduler=base,
            budgets=BUDGETS,
            schedule_at=schedule_at,
            rate_per_s=16.0,
            slo=SLO(0.050, 1.0),
        )
        assert report.goodput is not None
        probes.append(sum(len(g.result.probes) for g in report.goodput))
        if len(probes) == 1:
            rates = ", ".join(
                f"{'none' if g.budget_tokens is None else g.budget_tokens}: "
                f"{g.result.rate_per_s:.2f}"
                for g in report.goodput
            )
            print(f"   goodput req/s  {rates}")

    cpu, wall = timed(run, repeats)
    print(f"   CPU {fmt(cpu)}   wall {fmt(wall)}   simulations per run: {probes[0]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="repeats of A (B runs max(3, /2))")
    parser.add_argument("--pin", action="store_true", help="run on CPU 0 only")
    parser.add_argument("--only", default="A,B", help="scenarios to run, e.g. A")
    parser.add_argument("--calibration", default="measured", help="measured or seed")
    args = parser.parse_args()
    global MODEL
    MODEL = StepModel.from_hardware(
        resolve_model("llama-3.1-8b"), GPU, calibration=args.calibration
    )
    print(f"calibration {args.calibration}: ridge {MODEL.ridge_tokens:.0f} tokens")
    if args.pin:
        os.sched_setaffinity(0, {0})
    only = {s.strip().upper() for s in args.only.split(",")}
    if "A" in only:
        bench_point(args.repeats)
    if "B" in only:
        bench_goodput(max(3, args.repeats // 2))


if __name__ == "__main__":
    main()
