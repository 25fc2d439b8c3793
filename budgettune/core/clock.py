"""Accurate waits on the event loop: sleep until a monotonic deadline without blocking I/O.

asyncio rounds its selector timeout up to whole milliseconds, so a plain ``asyncio.sleep`` lands
0-1.5 ms late. We sleep until ``SPIN_S`` before the deadline, then yield with ``sleep(0)`` (the
loop keeps serving sockets with a zero timeout) until the deadline passes.
"""

from __future__ import annotations

import asyncio
import time

SPIN_S = 0.0015


async def sleep_until(deadline_s: float) -> float:
    """Wait until ``time.monotonic() >= deadline_s``; returns the lateness in seconds (>= 0)."""
    while True:
        now = time.monotonic()
        remaining = deadline_s - now
        if remaining <= 0:
            return -remaining
        if remaining > SPIN_S:
            await asyncio.sleep(remaining - SPIN_S)
        else:
            await asyncio.sleep(0)
