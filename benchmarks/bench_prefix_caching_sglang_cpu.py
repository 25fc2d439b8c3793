"""Benchmark: SGLang's radix cache against the simulator's SGLang rules, on SGLang's CPU path
(scripts/install-sglang-cpu.sh) and budgettune's tiny model, the engine pinned to core 0 and the
client to core 1. Two traffics, one single-budget sweep each (`--profile analytic`: only the hit
share is compared here, not timings):

- shared: 150 requests at 2.5/s, 4 system prompts of 768 tokens, prompts 1024-1536, outputs
  64-192 (`trace synth --prefix-groups 4 --prefix-tokens 768`), budget 512;
- pairs: four pairs of requests that arrive together, each pair its own 768-token prefix in an
  800-token prompt, and one more request of the first group a second later, budget 2048. SGLang
  takes a request's computed tokens into its radix tree after the iteration that computed them,
  so the second of a pair scheduled beside the first hits nothing; vLLM's rule (blocks cached
  as they are scheduled) would hit it.

Prints, for each: the share SGLang's own counters give (`sglang:cached_tokens_total` over
`sglang:prompt_tokens_total`), the simulator's (SGLang's rules), what vLLM's rule would give
where it differs, and the traffic's unbounded-cache share.

    .venv/bin/python benchmarks/bench_prefix_caching_sglang_cpu.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from vllm_cpu import BUDGETTUNE, CLIENT_CORE, ENGINE_CORE, ROOT, on_core

SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"
# The CPU recipe of tests/engine_real/sglang_env.py.
ENGINE_ARGS = ("--device cpu", "--max-total-tokens 65536", "--skip-server-warmup",
               "--disable-overlap-schedule")  # fmt: skip
SHARED = ("--rate", "2.5", "--requests", "150", "--seed", "0",
          "--prompt-dist", "uniform:min=1024,max=1536", "--output-dist", "uniform:min=64,max=192",
          "--prefix-groups", "4", "--prefix-tokens", "768")  # fmt: skip


def pairs_trace(path: Path) -> None:
    rows = [{"arrival_s": 2.0 * group, "prompt_tokens": 800, "output_tokens": 16,
             "prefix_group": group, "prefix_tokens": 768}
            for group in range(4) for _ in range(2)]  # fmt: skip
    rows.append({"arrival_s": 1.0, "prompt_tokens": 800, "output_tokens": 16,
                 "prefix_group": 0, "prefix_tokens": 768})  # fmt: skip
    rows.sort(key=lambda row: row["arrival_s"])
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def expected_share(trace: Path) -> float:
    done = subprocess.run([str(BUDGETTUNE), "trace", "inspect", str(trace), "--json"],
                          check=True, capture_output=True, text=True)  # fmt: skip
    return float(json.loads(done.stdout)["cache_hit_share"])


def sweep(model: Path, trace: Path, budget: int, out: Path) -> dict:
    run_dir = out / f"sweep-{trace.stem}"
    shutil.rmtree(run_dir, ignore_errors=True)
    engine_cmd = shlex.join([*on_core(ENGINE_CORE), str(SGLANG_PYTHON), "-m",
                             "sglang.launch_server"])  # fmt: skip
    engine_args = [arg for item in ENGINE_ARGS for arg in ("--engine-arg", item)]
    argv = [*on_core(CLIENT_CORE), str(BUDGETTUNE), "sweep", "--engine", "sglang",
            "--engine-cmd", engine_cmd, *engine_args,
            "--env", "HF_HUB_OFFLINE=1", "--model", str(model), "--dtype", "float32",
            "--max-num-seqs", "16", "--budgets", str(budget), "--baseline", "none",
            "--trace", str(trace), "--profile", "analytic", "--gpu", "h100-sxm",
            "--slo-tbt", "10s", "--slo-ttft", "60s", "--max-replays", "1",
            "-o", str(run_dir)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    (out / f"sweep-{trace.stem}.log").write_text(done.stdout + done.stderr)
    if done.returncode not in (0, 3):
        sys.exit(f"sweep on {trace.name} failed ({done.returncode}); see the log in {out}")
    doc = json.loads((run_dir / "recommendation.json").read_text())
    (point,) = [p for p in doc["points"] if p.get("prefix_cache")]
    return point


def vllm_rule_share(trace: Path, budget: int) -> float:
    """The simulator's share on vLLM's rule (blocks cached as they are scheduled)."""
    done = subprocess.run(
        [str(BUDGETTUNE), "simulate", "--trace", str(trace), "--budgets", str(budget),
         "--max-num-seqs", "16", "--prefix-caching", "on", "--slo-tbt", "10s",
         "--slo-ttft", "60s", "--json"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (point,) = json.loads(done.stdout)["points"]
    return float(point["prefix_cache"]["hit_share"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-sglang-prefix")
    args = parser.parse_args()
    if not SGLANG_PYTHON.exists():
        sys.exit(f"missing {SGLANG_PYTHON}: run scripts/install-sglang-cpu.sh")
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    model = out / "tiny-model"
    if not model.exists():
        subprocess.run([str(BUDGETTUNE), "tiny-model", str(model)], check=True)
    shared = out / "shared.jsonl"
    subprocess.run([str(BUDGETTUNE), "trace", "synth", *SHARED, "-o", str(shared)], check=True,
                   capture_output=True)  # fmt: skip
    pairs = out / "pairs.jsonl"
    pairs_trace(pairs)
    for trace, budget in ((shared, 512), (pairs, 2048)):
        point = sweep(model, trace, budget, out)
        cache = point["prefix_cache"]
        predicted = point["predicted"]["prefix_cache_hit_share"]
        print(
            f"{trace.stem}: SGLang's counters {cache['hit_share']:.1%} "
            f"({cache['hits_tokens']:,} of {cache['queries_tokens']:,} prompt tokens); "
            f"simulator (SGLang's rules) {predicted:.1%}; vLLM's rule "
            f"{vllm_rule_share(trace, budget):.1%}; unbounded {expected_share(trace):.1%}"
        )


if __name__ == "__main__":
    main()
