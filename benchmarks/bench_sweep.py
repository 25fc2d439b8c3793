"""Benchmark: the sweep's interval search against an exhaustive live grid (issue 7's targets),
and the same search with ``--parallel`` slots (issue 16's: the same answer in at most half the
rounds).

Both run side by side in one invocation, through the installed `budgettune sweep`, on the
embedded engine with the analytic llama-3.1-8b/h100-sxm model, replaying a window of the Azure
LLM conversation trace (Patel et al., "Splitwise", ISCA 2024; CC-BY-4.0) at its recorded gaps,
time-scaled. Targets: the same recommendation, with at most 40% of the grid's engine launches
and at most 40% of its wall time. Printed: each run's answer, launches, wall time and the
ratios, and every budget's measured and predicted p99 TBT so the margins to the SLO are visible.
With ``--parallel K`` (K > 1) the search runs a third time with K slots, and its rounds, launches
and wall time are printed beside the sequential search's. On a machine with fewer than two CPUs
per slot the K engines and clients share cores, and their p99s carry that contention.

    .venv/bin/python benchmarks/bench_sweep.py [--slo-tbt 50ms] [--align 256] [--window 0:60s]
        [--time-scale 3] [--parallel 4] [--no-grid] [--model llama-3.1-8b] [--gpu h100-sxm]
        [--out reports/bench-sweep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "azure-llm-2023-conv.csv"


def run(label: str, args: list[str], run_dir: Path) -> tuple[dict, float]:
    cmd = [str(Path(sys.executable).with_name("budgettune")), "sweep", *args, "-o", str(run_dir)]
    print(f"\n$ {' '.join(cmd[1:])}", flush=True)
    started = time.perf_counter()
    result = subprocess.run(cmd, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if result.returncode not in (0, 3):
        sys.exit(f"{label} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    print(result.stdout.rstrip())
    return json.loads((run_dir / "recommendation.json").read_text()), wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slo-tbt", default="50ms")
    parser.add_argument("--slo-ttft", default="1s")
    parser.add_argument("--align", default="256")
    parser.add_argument("--window", default="0:60s", help="trace window, START:END with units")
    parser.add_argument("--time-scale", default="3", help="replay k times faster")
    parser.add_argument("--parallel", type=int, default=1, help="also run the search with K slots")
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--gpu", default="h100-sxm", help="GPU preset of the built-in engine")
    parser.add_argument("--no-grid", action="store_true", help="skip the exhaustive grid")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-sweep")
    opts = parser.parse_args()
    if not TRACE.is_file():
        sys.exit(f"missing {TRACE}")
    if opts.out.exists():
        shutil.rmtree(opts.out)
    common = [
        "--engine", "sim", "--model", opts.model, "--gpu", opts.gpu,
        "--trace", str(TRACE), "--window", opts.window, "--time-scale", opts.time_scale,
        "--slo-tbt", opts.slo_tbt, "--slo-ttft", opts.slo_ttft, "--align", opts.align,
    ]  # fmt: skip
    search, search_s = run("search", common, opts.out / "search")
    if opts.parallel > 1:
        parallel, parallel_s = run(
            "parallel", [*common, "--parallel", str(opts.parallel)], opts.out / "parallel"
        )
        print(
            f"\nsequential search: {search['budget']}, {search['rounds']} round(s), "
            f"{search['launches']} launches, {search_s:.0f} s\n"
            f"--parallel {opts.parallel}: {parallel['budget']}, {parallel['rounds']} round(s), "
            f"{parallel['launches']} launches, {parallel_s:.0f} s\n"
            f"-> {'SAME' if parallel['budget'] == search['budget'] else 'DIFFERENT'} answer, "
            f"rounds {parallel['rounds'] / search['rounds']:.0%} of the sequential "
            "(target <= 50%)"
        )
        for point in sorted(parallel["points"], key=lambda p: (p.get("round") or 0, p["budget"])):
            print(f"  round {point.get('round')}, slot {point.get('slot')}: budget "
                  f"{point['budget']} p99 TBT {point.get('tbt_ms') or 0:.1f} ms")  # fmt: skip
    if opts.no_grid:
        return
    grid, grid_s = run("grid", [*common, "--exhaustive"], opts.out / "grid")

    print(f"\nbudget  predicted p99 TBT  grid p99 TBT  search p99 TBT   (SLO {opts.slo_tbt})")
    searched = {p["budget"]: p for p in search["points"]}
    for point in grid["points"]:
        budget = point["budget"]
        predicted = (point.get("predicted") or {}).get("tbt_at_slo_ms")
        other = searched.get(budget)
        print(
            f"{budget:>6}  {predicted:>17.1f}  {point['tbt_ms']:>12.1f}  "
            + (f"{other['tbt_ms']:>14.1f}" if other else f"{'-':>14}")
            + ("  (reference: engine default)" if point["role"] == "reference" else "")
        )
    candidates = len(grid["candidates"]["budgets"])
    print(
        f"\ncandidates: {candidates} ({', '.join(map(str, grid['candidates']['budgets']))})\n"
        f"recommendation: search {search['budget']}, grid {grid['budget']} -> "
        f"{'SAME' if search['budget'] == grid['budget'] else 'DIFFERENT'}\n"
        f"engine launches: search {search['launches']}, grid {grid['launches']} -> "
        f"{search['launches'] / grid['launches']:.0%} (target <= 40%)\n"
        f"wall time: search {search_s:.0f} s, grid {grid_s:.0f} s -> "
        f"{search_s / grid_s:.0%} (target <= 40%)"
    )


if __name__ == "__main__":
    main()
