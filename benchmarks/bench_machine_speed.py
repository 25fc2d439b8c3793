"""Benchmark: does this machine keep its speed? Times one fixed unit of pure-Python work (the
same instructions every time) over and over for ``--duration`` seconds, and prints, every
``--every`` seconds, the unit's median time and the CPU time the kernel counted as stolen by
the hypervisor (``/proc/stat``). With ``--load`` (the default) a second process keeps the other
core busy, as an engine and its client do during a sweep.

Why: issue 14's repeatability benchmark saw a vLLM CPU server run about 3x slower per iteration
in one sweep than in the one before it, on the same arrival schedule. If the machine's own speed
moves by that much, no interval computed inside one sweep can cover the next one.

    .venv/bin/python benchmarks/bench_machine_speed.py [--duration 150] [--every 10] [--no-load]

The last line is the ratio of the slowest window's median to the fastest's, measured in this run.

``--alongside`` samples lightly beside another run instead (a sweep, a benchmark): no load, and
each window is one sample, the fastest of 5 short units (a tenth of the full unit, about 10 ms
each), stamped with the wall clock so it can be lined up with the other run's times. That costs
about 1% of one core at ``--every 5``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from pathlib import Path

UNIT_LOOPS = 2_000_000  # about 0.1-0.2 s of one core on this project's 2-core machine
SHORT_UNITS = 5  # --alongside: the fastest of this many tenth-size units is one sample


def work_unit_s(loops: int = UNIT_LOOPS) -> float:
    """Seconds to run the fixed unit once (a Python loop: no cache or memory effects to speak of,
    so its time follows the core's speed)."""
    started = time.perf_counter()
    total = 0
    for i in range(loops):
        total += i * i
    return time.perf_counter() - started


def sample_alongside(duration_s: float, every_s: float) -> None:
    """One light sample per window: the fastest of SHORT_UNITS short units, scaled to the full
    unit (the fastest, because another process can only add time to a unit)."""
    stop_at = time.monotonic() + duration_s
    samples_ms: list[float] = []
    while time.monotonic() < stop_at:
        fastest_s = min(work_unit_s(UNIT_LOOPS // 10) for _ in range(SHORT_UNITS)) * 10
        samples_ms.append(fastest_s * 1e3)
        print(f"{time.strftime('%H:%M:%S')}  unit {fastest_s * 1e3:6.1f} ms", flush=True)
        time.sleep(max(0.0, every_s - fastest_s))
    print(
        f"samples {len(samples_ms)}: unit {statistics.median(samples_ms):.1f} ms "
        f"[{min(samples_ms):.1f}-{max(samples_ms):.1f}], slowest / fastest "
        f"x{max(samples_ms) / min(samples_ms):.2f}"
    )


def keep_busy(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        work_unit_s()


def cpu_ticks() -> tuple[int, int]:
    """(all CPU ticks, stolen ticks) so far, summed over cores; (0, 0) where /proc/stat is
    missing (not Linux)."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return 0, 0
    fields = [int(v) for v in stat.read_text().splitlines()[0].split()[1:9]]
    return sum(fields), fields[7]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=150.0, help="seconds in all")
    parser.add_argument("--every", type=float, default=10.0, help="seconds per window")
    parser.add_argument("--no-load", dest="load", action="store_false", help="one core only")
    parser.add_argument("--alongside", action="store_true", help="light samples beside a run")
    args = parser.parse_args()
    if args.alongside:
        sample_alongside(args.duration, args.every)
        return

    stop_at = time.monotonic() + args.duration
    other = None
    if args.load:
        other = multiprocessing.Process(target=keep_busy, args=(stop_at,), daemon=True)
        other.start()
    medians_ms: list[float] = []
    began = time.monotonic()
    ticks, stolen = cpu_ticks()
    try:
        while time.monotonic() < stop_at:
            window_end = min(stop_at, time.monotonic() + args.every)
            units_s = [work_unit_s()]
            while time.monotonic() < window_end:
                units_s.append(work_unit_s())
            now_ticks, now_stolen = cpu_ticks()
            steal = (now_stolen - stolen) / max(1, now_ticks - ticks)
            ticks, stolen = now_ticks, now_stolen
            median_ms = statistics.median(units_s) * 1e3
            medians_ms.append(median_ms)
            print(
                f"t={time.monotonic() - began:5.0f} s  unit median {median_ms:6.1f} ms "
                f"[{min(units_s) * 1e3:.1f}-{max(units_s) * 1e3:.1f}] over {len(units_s)}  "
                f"steal {steal:.1%}",
                flush=True,
            )
    finally:
        if other is not None:
            other.terminate()
            other.join(5)
    slowest, fastest = max(medians_ms), min(medians_ms)
    print(
        f"windows {len(medians_ms)}: unit median {statistics.median(medians_ms):.1f} ms "
        f"[{fastest:.1f}-{slowest:.1f}]; slowest window / fastest x{slowest / fastest:.2f}"
        f" ({'other core busy' if args.load else 'other core idle'})"
    )


if __name__ == "__main__":
    main()
