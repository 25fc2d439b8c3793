"""Benchmark: what tokenizing the prompt adds to TTFT (text prompts against token ids).

Starts one vLLM CPU server (scripts/install-vllm-cpu.sh) on budgettune's tiny model, pinned to
core 0, at one budget, and replays the same traffic against it with `--prompt-form ids` and
`--prompt-form text`, alternating (ids, text, ids, text, ...: each pair shares its seed, so the
same schedule), budgettune pinned to core 1. Prints each replay's client TTFT p50/p99, vLLM's
own /metrics TTFT, the prompt tokens vLLM counted against the schedule, and per pair the ratio
text / ids, with the median and range over pairs.

Default workload: Poisson 2.5 requests/s, 120 requests, prompts 512-1536 tokens, outputs 64-192,
budget 512 (the side-by-side with vLLM's own tuner).

    .venv/bin/python benchmarks/bench_prompt_form.py [--pairs 2] [--requests 120] [--rate 2.5]
        [--budget 512] [--eager] [--out reports/bench-prompt-form]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
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

FORMS = ("ids", "text")


def start_vllm(model: Path, budget: int, port: int, out: Path, eager: bool) -> subprocess.Popen:
    env = {**os.environ, **VLLM_ENV, "VLLM_CACHE_ROOT": str(out / "vllm-cache")}
    argv = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--dtype", "float32", "--max-num-batched-tokens", str(budget), "--host", "127.0.0.1",
            "--port", str(port), *(["--enforce-eager"] if eager else [])]  # fmt: skip
    log = (out / "vllm.log").open("w")
    return subprocess.Popen(
        [*on_core(ENGINE_CORE), *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def wait_healthy(url: str, server: subprocess.Popen, limit_s: float = 600) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if server.poll() is not None:
            sys.exit(f"vLLM exited ({server.returncode}); see its log")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    sys.exit(f"vLLM not healthy after {limit_s:.0f} s")


def replay(url: str, model: Path, form: str, seed: int, args: argparse.Namespace) -> dict:
    out = args.out / f"{form}-{seed}"
    shutil.rmtree(out, ignore_errors=True)
    argv = [str(BUDGETTUNE), "replay", "--engine", "external", "--url", url,
            "--tokenizer", str(model), "--prompt-form", form, "--rate", str(args.rate),
            "--requests", str(args.requests), "--prompt-dist", "uniform:min=512,max=1536",
            "--output-dist", "uniform:min=64,max=192", "--seed", str(seed), "--warmup", "5",
            "--json", "-o", str(out)]  # fmt: skip
    if form == "ids":
        argv.remove("--tokenizer")
        argv.remove(str(model))
    done = subprocess.run(
        [*on_core(CLIENT_CORE), *argv], capture_output=True, text=True, timeout=1800
    )
    if done.returncode != 0:
        sys.exit(f"replay ({form}) failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def row(form: str, seed: int, doc: dict) -> str:
    server = (doc["selfcheck"].get("server") or {}).get("ttft") or {}
    counted = doc["selfcheck"].get("prompt_tokens") or {}
    agree = counted.get("checked", 0) - counted.get("off", 0)
    return (
        f"{form:>5} seed {seed}: TTFT p50 {doc['ttft_ms']['p50']:7.1f} ms, p99 "
        f"{doc['ttft_ms']['p99']:7.1f} ms; vLLM /metrics p50 {server.get('p50_ms', '-')} ms, p99 "
        f"{server.get('p99_ms', '-')} ms; rate {doc['selfcheck']['achieved_rate_per_s']:.3f}/s; "
        f"prompt tokens as scheduled {agree}/{counted.get('checked', 0)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--rate", type=float, default=2.5)
    parser.add_argument("--budget", type=int, default=512)
    parser.add_argument("--eager", action="store_true", help="vLLM --enforce-eager")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "bench-prompt-form")
    args = parser.parse_args()
    model = tiny_model(args.out)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_vllm(model, args.budget, port, args.out, args.eager)
    try:
        print(f"vLLM CPU, tiny model, budget {args.budget}, healthy after "
              f"{wait_healthy(url, server):.0f} s; {args.requests} requests at {args.rate}/s, "
              "prompts 512-1536, outputs 64-192", flush=True)  # fmt: skip
        ratios: dict[str, list[float]] = {"p50": [], "p99": []}
        for seed in range(args.pairs):
            docs = {}
            for form in FORMS:
                docs[form] = replay(url, model, form, seed, args)
                print(row(form, seed, docs[form]), flush=True)
            for key in ratios:
                ratios[key].append(docs["text"]["ttft_ms"][key] / docs["ids"]["ttft_ms"][key])
        for key, values in ratios.items():
            spread = f"range x{min(values):.3f}-x{max(values):.3f} over {len(values)} pairs"
            print(f"TTFT {key} text / ids: median x{statistics.median(values):.3f} ({spread})")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)


if __name__ == "__main__":
    main()
