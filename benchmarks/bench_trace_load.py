"""Benchmark: load a 1,000,000-row trace (Azure CSV with timestamps, Vidur numeric CSV, the same
Azure CSV gzipped, budgettune JSONL) and print the load time and peak memory, median and range.

Each load runs in a fresh Python process so that its peak RSS (VmHWM) is its own; the time
is measured inside that process around ``load_trace`` alone, the RSS covers the whole process
(interpreter, numpy and budgettune imports included; the baseline after imports is shown too).
Targets (issue 3): under 3 s and under 500 MB for a 1,000,000-row CSV.

    .venv/bin/python benchmarks/bench_trace_load.py [--rows 1000000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, resource, sys, time
from budgettune.trace.load import load_trace

def high_water_kb():
    # VmHWM is this process's own peak RSS; ru_maxrss can carry the parent's over exec
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

base = high_water_kb()
start = time.perf_counter()
trace, report = load_trace(sys.argv[1])
elapsed = time.perf_counter() - start
peak = high_water_kb()
print(json.dumps({"s": elapsed, "peak_kb": peak, "base_kb": base, "rows": len(trace)}))
"""


def write_files(folder: Path, rows: int) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    gaps_ns = rng.exponential(0.18e9, rows).astype(np.int64)
    stamps = np.datetime64("2023-11-16T18:15:46", "ns") + np.cumsum(gaps_ns).astype(
        "timedelta64[ns]"
    )
    text = np.datetime_as_string(stamps, unit="ns")
    prompt = np.clip(rng.lognormal(6.5, 1.0, rows), 1, 32_000).astype(np.int64)
    output = np.clip(rng.lognormal(5.0, 1.0, rows), 1, 4_000).astype(np.int64)
    seconds = np.cumsum(gaps_ns) / 1e9
    files = {
        "azure csv": folder / "azure.csv",
        "azure csv.gz": folder / "azure.csv.gz",
        "vidur csv": folder / "vidur.csv",
        "budgettune jsonl": folder / "trace.jsonl",
    }
    azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(
        f"{t[:10]} {t[11:27]},{p},{o}"
        for t, p, o in zip(text.tolist(), prompt.tolist(), output.tolist(), strict=True)
    )
    files["azure csv"].write_text(azure)
    files["azure csv.gz"].write_bytes(gzip.compress(azure.encode(), compresslevel=1))
    files["vidur csv"].write_text(
        "arrived_at,num_prefill_tokens,num_decode_tokens\n"
        + "".join(
            f"{s:.6f},{p},{o}\n"
            for s, p, o in zip(seconds.tolist(), prompt.tolist(), output.tolist(), strict=True)
        )
    )
    files["budgettune jsonl"].write_text(
        "".join(
            json.dumps({"arrival_s": round(s, 6), "prompt_tokens": p, "output_tokens": o}) + "\n"
            for s, p, o in zip(seconds.tolist(), prompt.tolist(), output.tolist(), strict=True)
        )
    )
    return files


def measure(path: Path, repeats: int, rows: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"s": [], "peak_mb": [], "base_mb": []}
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        result = json.loads(done.stdout)
        assert result["rows"] == rows, result
        out["s"].append(result["s"])
        out["peak_mb"].append(result["peak_kb"] / 1024)
        out["base_mb"].append(result["base_kb"] / 1024)
    return out


def summary(values: list[float], spec: str) -> str:
    return f"{statistics.median(values):{spec}} [{min(values):{spec}}-{max(values):{spec}}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as folder:
        files = write_files(Path(folder), args.rows)
        print(f"{args.rows:,} rows, {args.repeats} runs each; median [min-max]")
        print(f"{'file':<18} {'MB':>6}  {'load s':<22} {'peak RSS MB':<22} {'after imports MB'}")
        for name, path in files.items():
            figures = measure(path, args.repeats, args.rows)
            size_mb = path.stat().st_size / 1e6
            print(
                f"{name:<18} {size_mb:>6.1f}  {summary(figures['s'], '.2f'):<22} "
                f"{summary(figures['peak_mb'], '.0f'):<22} {summary(figures['base_mb'], '.0f')}"
            )


if __name__ == "__main__":
    main()
