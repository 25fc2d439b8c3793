"""The machine's speed, read from inside: the time of one fixed unit of pure-Python work, taken
by the load generator just before a replay's first send and just after its last response, when
neither it nor the engine has anything to do (so it perturbs nothing it measures).

Why: on this project's 2-core CI machine (a Firecracker VM) the same unit of work took 101-108 ms
for minutes, then 167-200 ms, with the kernel counting 0.0-0.3% of the time as stolen
(benchmarks/bench_machine_speed.py, README "Does the answer repeat?"). A replay that straddles
such a change mixes two machines' latencies, and only a timing of known work sees it."""

from __future__ import annotations

import time

REFERENCE_LOOPS = 200_000  # one unit: about 10 ms of one core on the 2-core machine
REFERENCE_UNITS = 5  # the fastest of this many is the reading (other work only adds time)
# Before and after further apart than this: the machine changed speed during the run. The two
# states seen differ by x1.6-1.9; readings of an unchanged machine differed by at most x1.09
# (41 readings on each core, idle, 2026-12-02).
SPEED_CHANGE_RATIO = 1.3
# A core coming out of idle runs slow for a while: on this 2-core machine, after 2 s idle the
# unit took ~14 ms where it takes ~7.9 ms busy, for up to 0.5-1 s of work, at random (idle 6 of
# 114 readings, each the fastest of 5 units 30 ms apart, came out x1.3-1.75 above the rest, one
# at a time, while the changes this check is for last minutes). A reading after an idle wait
# (the engine starting, the last response's drain) then looked like a change of speed: 5 of 24
# mock replays (idle, read, work, wait, read) were flagged with pauses between readings, 0 of 24
# with the same time spent working (2026-12-07). So a reading is taken again after
# WARM_UP_S of the same work, up to READINGS times in all, the fastest kept.
READINGS = 3
WARM_UP_S = 0.3


def _work(loops: int) -> int:
    """The fixed unit's pure-Python work, ``loops`` times round."""
    total = 0
    for i in range(loops):
        total += i * i
    return total


def reference_ms() -> float:
    """Milliseconds of the fastest of REFERENCE_UNITS runs of the fixed unit."""
    fastest_s = float("inf")
    for _ in range(REFERENCE_UNITS):
        started = time.perf_counter()
        _work(REFERENCE_LOOPS)
        fastest_s = min(fastest_s, time.perf_counter() - started)
    return round(fastest_s * 1e3, 3)


def warm_up(seconds: float = WARM_UP_S) -> None:
    """Run the fixed unit's work for ``seconds`` (in slices of 1,000 loops, each well under a
    millisecond): a core that was idle reaches its working speed (see WARM_UP_S)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        _work(1000)


def settled_reference_ms(against_ms: float | None = None) -> float:
    """:func:`reference_ms`, read again after :func:`warm_up` (READINGS in all at most, the
    fastest kept) while it is further than SPEED_CHANGE_RATIO from ``against_ms`` (the run's
    other reading), or, with nothing to compare, read twice: a core slow from idling is not
    taken for a change of speed. Blocks for the warm-ups: call it with nothing in flight."""
    reading = reference_ms()
    if against_ms is None:
        warm_up()
        return min(reading, reference_ms())
    for _ in range(READINGS - 1):
        change = speed_change(against_ms, reading)
        if change is not None and change <= SPEED_CHANGE_RATIO:
            break
        warm_up()
        reading = min(reading, reference_ms())
    return reading


def speed_change(before_ms: float | None, after_ms: float | None) -> float | None:
    """The slower reading over the faster (>= 1), None without both."""
    if not before_ms or not after_ms:
        return None
    return max(before_ms, after_ms) / min(before_ms, after_ms)
