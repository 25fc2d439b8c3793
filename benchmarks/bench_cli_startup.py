"""Benchmark: CLI start-up. Wall time of ``budgettune --version``, ``--help`` and a ``roofline``
query (fresh process each, median and range), the import time of ``budgettune.cli`` from
``python -X importtime``, and which heavy packages that import pulls in.

The floor is ``python -c "import typer"`` (what any typer CLI pays); issue 12's target is
``--help`` and ``--version`` within 2.5x of it, median against median, printed as a ratio.
Timings on a shared machine are noisy: compare medians taken in the same run.

    .venv/bin/python benchmarks/bench_cli_startup.py [--repeats 5]

To compare with an older commit: ``git archive COMMIT budgettune | tar -x -C /tmp/old`` and run
it with ``PYTHONPATH=/tmp/old`` (the console script and ``python -P`` then import that copy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("scipy", "plotly", "httpx", "torch", "transformers", "numpy", "rich.progress")
OURS_HEAVY = (
    "budgettune.report", "budgettune.app", "budgettune.engines", "budgettune.loadgen",
    "budgettune.profiling",
    # the names before the layered layout, for a run against an older checkout
    "budgettune.profile", "budgettune.engine", "budgettune.load", "budgettune.pipeline",
)  # fmt: skip


def _command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m budgettune``."""
    script = Path(sys.executable).with_name("budgettune")
    if script.exists():
        return [str(script)]
    found = shutil.which("budgettune")
    return [found] if found else [sys.executable, "-m", "budgettune"]


def wall_s(cases: list[list[str]], repeats: int) -> list[list[float]]:
    """Seconds per run of each command line, taken in interleaved rounds (one run of every case
    per round) so that load on a shared machine falls on all of them alike."""
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(repeats):
        for argv, runs in zip(cases, times, strict=True):
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            runs.append(time.perf_counter() - start)
    return times


def import_profile(module: str) -> tuple[float, dict[str, float]]:
    """(cumulative seconds of ``import module``, {package: seconds}) from one ``-X importtime``
    run; a package appears when the import loaded it, with its largest single import subtree."""
    done = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", "-c", f"import {module}"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    total = 0.0
    loaded: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, _, cumulative, name = (part.strip() for part in line.replace(":", "|", 1).split("|"))
        seconds = int(cumulative) / 1e6
        if name == module:
            total = seconds
        for heavy in (*HEAVY, *OURS_HEAVY):
            if name == heavy or name.startswith(heavy + "."):
                loaded[heavy] = max(loaded.get(heavy, 0.0), seconds)
    return total, loaded


def _line(label: str, times: list[float]) -> str:
    ms = sorted(t * 1e3 for t in times)
    return f"{label:<50} median {statistics.median(ms):7.0f} ms   range {ms[0]:.0f}-{ms[-1]:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cli = _command()
    floor = [sys.executable, "-c", "import typer"]
    cases = [
        ("python -c 'import typer' (floor)", floor),
        ("python -c 'import typer, rich.console'", [*floor[:-1], "import typer, rich.console"]),
        ("budgettune --version", [*cli, "--version"]),
        ("budgettune --help", [*cli, "--help"]),
        (
            "budgettune roofline --json (llama-3.1-8b, h100)",
            [*cli, "roofline", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--json"],
        ),
    ]
    where = subprocess.run(
        [sys.executable, "-P", "-c", "import budgettune; print(budgettune.__file__)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"budgettune package measured: {where} (PYTHONPATH may point at another checkout)")
    print(f"start-up wall time, {args.repeats} fresh processes each ({' '.join(cli)}):")
    medians: dict[str, float] = {}
    timings = wall_s([argv for _, argv in cases], args.repeats)
    for (label, _), times in zip(cases, timings, strict=True):
        medians[label] = statistics.median(times)
        print(_line(label, times))
    floor_s = medians[cases[0][0]]
    for label in ("budgettune --version", "budgettune --help"):
        print(f"{label:<50} {medians[label] / floor_s:.2f}x the import typer floor (target 2.5x)")
    totals = []
    loaded: dict[str, float] = {}
    for _ in range(args.repeats):
        total, loaded = import_profile("budgettune.cli")
        totals.append(total)
    print(_line("python -X importtime: import budgettune.cli", totals))
    heavy = ", ".join(f"{name} {s * 1e3:.0f} ms" for name, s in loaded.items()) or "none"
    print(f"heavy packages loaded by import budgettune.cli (last run, cumulative): {heavy}")


if __name__ == "__main__":
    main()
