"""Benchmark: the profile step on the vLLM CPU build within its time budget (issue 14, item 6:
at most 60 s of probing, held-out fit errors no worse than the whole grid's).

Runs `budgettune profile --engine vllm` on budgettune's tiny model twice in one invocation, side
by side on the same machine: ``--time-budget none`` (the whole grid, as before the budget) and
``--time-budget auto`` (60 s on a machine without a GPU), alternating for ``--runs`` rounds. vLLM
is pinned to core 0 and budgettune to core 1 where the machine has two cores. Printed per run:
wall time, probing time, probes measured and skipped, and the held-out median error per series
and pooled; then medians and ranges per setting.

    .venv/bin/python benchmarks/bench_profile_time.py [--runs 1] [--max-batch 256]
        [--max-tokens 2048] [--settings none,auto] [--out reports/bench-profile-time]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The vLLM CPU recipe (the tiny model, vLLM on core 0, the client on core 1) is the repeatability
# benchmark's; this folder is sys.path[0] when a benchmark runs as a script.
from bench_repeatability import BUDGETTUNE, ROOT, client, engine_args

SERIES = ("prefill", "decode", "mixed")


def profile_once(setting: str, engine: list[str], out: Path, opts: argparse.Namespace) -> dict:
    """One profile; its figures as a dict."""
    path = out / f"profile-{setting}.json"
    cmd = [
        *client(), str(BUDGETTUNE), "profile", *engine,
        "--max-tokens", str(opts.max_tokens), "--max-batch", str(opts.max_batch),
        "--time-budget", setting, "-o", str(path),
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"profile --time-budget {setting} failed ({done.returncode}):\n"
                 f"{done.stderr[-3000:]}")  # fmt: skip
    doc = json.loads(path.read_text())
    step = doc.get("step") or {}
    holdout = {k: v["median_rel_error"] for k, v in (step.get("holdout") or {}).items()}
    pooled = (step.get("holdout_all") or {}).get("median_rel_error")
    return {
        "setting": setting, "wall_s": wall_s, "probing_s": doc["elapsed_s"],
        "probes": len(doc["probes"]), "skipped": len(doc.get("skipped") or ()),
        "holdout": holdout, "pooled": pooled,
    }  # fmt: skip


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def show(run: dict) -> str:
    series = " / ".join(_pct(run["holdout"].get(s)) for s in SERIES)
    return (
        f"--time-budget {run['setting']:>4}: {run['wall_s']:.0f} s wall, {run['probing_s']:.0f} s "
        f"probing, {run['probes']} probes, {run['skipped']} skipped; held-out median error "
        f"{series} (prefill / decode / mixed), pooled {_pct(run['pooled'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="rounds of none then auto")
    parser.add_argument(
        "--settings", default="none,auto", help="the --time-budget settings, in turn each round"
    )
    parser.add_argument("--max-batch", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-profile-time")
    opts = parser.parse_args()
    if opts.out.exists():
        shutil.rmtree(opts.out)
    opts.out.mkdir(parents=True)
    engine = engine_args("vllm", opts.out)  # builds the tiny model; exits without .venv-vllm
    settings = opts.settings.split(",")
    runs = []
    for number in range(1, opts.runs + 1):
        for setting in settings:
            run = profile_once(setting, engine, opts.out, opts)
            runs.append(run)
            print(f"run {number}: {show(run)}", flush=True)
    print("\n== medians (ranges) per setting")
    for setting in dict.fromkeys(settings):  # each once, in order
        mine = [r for r in runs if r["setting"] == setting]
        for key in ("wall_s", "probing_s"):
            values = [r[key] for r in mine]
            print(f"{setting:>4} {key}: {statistics.median(values):.0f} s "
                  f"({min(values):.0f}-{max(values):.0f})")  # fmt: skip
        pooled = [r["pooled"] for r in mine if r["pooled"] is not None]
        if pooled:
            print(f"{setting:>4} pooled held-out error: {statistics.median(pooled) * 100:.1f}% "
                  f"({min(pooled) * 100:.1f}-{max(pooled) * 100:.1f}%)")  # fmt: skip


if __name__ == "__main__":
    main()
