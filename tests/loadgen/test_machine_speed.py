"""The machine-speed reading around a replay: a change between before and after is a client
health warning (so a sweep sets the replay aside and measures it again); a steady machine is
not, and a run without both readings is not judged."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from budgettune.loadgen.machine_speed import SPEED_CHANGE_RATIO, reference_ms, speed_change
from budgettune.loadgen.selfcheck import LagStats, SelfCheck

HEALTHY = SelfCheck(
    scheduled=10, sent=10, target_rate_per_s=5.0, achieved_rate_per_s=5.0,
    send_lag=LagStats(0.01, 0.5, 1.0), timer_lateness=LagStats(0.0, 0.2, 0.4), chunks=100,
    merged_chunks=0, merged_chunk_share=0.0, merged_chunks_mode="spread",
    merged_chunks_warning=False, complete=True, stop_reason=None, duration_s=2.0,
    machine_ref_before_ms=101.0, machine_ref_after_ms=104.0,
)  # fmt: skip


def test_a_steady_machine_is_healthy() -> None:
    assert HEALTHY.health_warnings() == ()


@pytest.mark.parametrize("before, after", [(103.0, 167.6), (200.0, 104.0)])
def test_a_speed_change_either_way_is_a_warning(before: float, after: float) -> None:
    check = replace(HEALTHY, machine_ref_before_ms=before, machine_ref_after_ms=after)
    (warning,) = check.health_warnings()
    assert warning.startswith("the machine's speed changed during the run")
    assert f"{before:.1f} ms before and {after:.1f} ms after" in warning
    assert check.to_json()["client_warnings"] == [warning]


def test_just_under_the_ratio_is_not_a_change() -> None:
    check = replace(HEALTHY, machine_ref_before_ms=100.0, machine_ref_after_ms=129.0)
    assert SPEED_CHANGE_RATIO > 1.29 and check.health_warnings() == ()


def test_without_both_readings_nothing_is_judged() -> None:
    # an interrupted run has no after reading
    assert speed_change(100.0, None) is None
    assert replace(HEALTHY, machine_ref_after_ms=None).health_warnings() == ()


def test_the_reading_is_a_positive_time() -> None:
    first, second = reference_ms(), reference_ms()
    assert first > 0 and second > 0


def test_a_warm_up_works_for_its_whole_time() -> None:
    from budgettune.loadgen.machine_speed import warm_up

    # It loops until its deadline (so it lasts at least its time), and it is work on this core,
    # not a sleep: a sleep would leave this process's CPU time where it was.
    wall_started, cpu_started = time.perf_counter(), time.process_time()
    warm_up(0.05)
    assert time.perf_counter() - wall_started >= 0.05
    assert time.process_time() > cpu_started


def _readings(monkeypatch: pytest.MonkeyPatch, values: list[float]) -> list[float]:
    """reference_ms gives ``values`` in turn; the warm-ups between readings take no time."""
    from budgettune.loadgen import machine_speed

    queue = list(values)
    monkeypatch.setattr(machine_speed, "reference_ms", lambda: queue.pop(0))
    monkeypatch.setattr(machine_speed, "warm_up", lambda seconds=0.0: None)
    return queue


def test_a_short_slow_stretch_is_read_past_and_a_lasting_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from budgettune.loadgen.machine_speed import settled_reference_ms

    # After the run: one slow reading, then the machine's own speed again.
    left = _readings(monkeypatch, [13.9, 8.6, 99.0])
    assert settled_reference_ms(8.5) == 8.6 and left == [99.0]
    # A speed that lasts through every reading is the machine's: it stays a change.
    left = _readings(monkeypatch, [13.9, 14.1, 13.8, 99.0])
    assert settled_reference_ms(8.5) == 13.8 and left == [99.0]
    change = speed_change(8.5, 13.8)
    assert change is not None and change > SPEED_CHANGE_RATIO
    # A reading that agrees is taken once.
    left = _readings(monkeypatch, [8.9, 99.0])
    assert settled_reference_ms(8.5) == 8.9 and left == [99.0]
    # Before the run, with nothing to compare: the faster of two.
    left = _readings(monkeypatch, [12.7, 8.4, 99.0])
    assert settled_reference_ms() == 8.4 and left == [99.0]
