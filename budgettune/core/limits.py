"""The largest values budgettune takes, stated once: every size a user gives is checked against
these before anything is allocated (``--requests 99999999999999`` is refused, not attempted).
They are far above any real deployment; the README lists them under "Limits".
"""

from __future__ import annotations

import math

from budgettune.core.errors import SpecError

MAX_TOKENS = 1 << 24  # one token count: a budget, a prompt, a context, max-model-len (16,777,216)
MAX_SEQS = 1 << 20  # running sequences (--max-num-seqs), decodes in one iteration
MAX_REQUESTS = 2_000_000  # requests in one run (--requests, a trace, duration x rate)
MAX_RATE_PER_S = 100_000.0  # arrival rate, requests/s
MAX_DURATION_S = 7 * 86_400.0  # any duration: an SLO, a timeout, --duration, a window (a week)
# The slowest arrival rate: one request a week, the longest run. Slower, a run of even two
# requests outlasts any duration budgettune takes (1e-300/s read as p50s of 0.0 ms).
MIN_RATE_PER_S = 1.0 / MAX_DURATION_S
MAX_GPUS = 1024  # tensor parallelism
MAX_REPLAYS = 20  # replays of one budget (--max-replays): each one's schedule is built up front
MAX_BLOCK_TOKENS = 1 << 16  # KV block size
MAX_PORT = 65_535


def check_count(value: int, *, field: str, maximum: int, minimum: int = 1, what: str = "") -> int:
    """``value`` when ``minimum <= value <= maximum``; SpecError naming ``field`` otherwise
    (``what`` names the unit in the message: "tokens", "requests")."""
    unit = f" {what}" if what else ""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"expected a whole number, got {value!r}", field=field)
    if value < minimum:
        if minimum == 1:
            raise SpecError(f"must be positive, got {value:,}", field=field)
        raise SpecError(f"must be at least {minimum:,}{unit}, got {value:,}", field=field)
    if value > maximum:
        raise SpecError(
            f"{value:,}{unit} is more than budgettune takes (at most {maximum:,})", field=field
        )
    return value


def check_tokens(value: int, *, field: str, minimum: int = 1) -> int:
    """A token count in [minimum, MAX_TOKENS]."""
    return check_count(value, field=field, maximum=MAX_TOKENS, minimum=minimum, what="tokens")


def check_number(
    value: float,
    *,
    field: str,
    maximum: float | None = None,
    minimum: float = 0.0,
    inclusive_minimum: bool = False,
    what: str = "",
) -> float:
    """A finite number above ``minimum`` (or at it, ``inclusive_minimum``) and at most
    ``maximum``; SpecError naming ``field`` otherwise."""
    unit = f" {what}" if what else ""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(f"expected a finite number, got {value!r}", field=field)
    low = value < minimum if inclusive_minimum else value <= minimum
    if low:
        bound = "at least" if inclusive_minimum else "more than"
        if minimum == 0 and not inclusive_minimum:
            raise SpecError(f"must be positive, got {value:g}", field=field)
        raise SpecError(f"must be {bound} {minimum:g}{unit}, got {value:g}", field=field)
    if maximum is not None and value > maximum:
        raise SpecError(
            f"{value:g}{unit} is more than budgettune takes (at most {maximum:g})", field=field
        )
    return float(value)


def check_share(value: float, *, field: str, allow_zero: bool = False) -> float:
    """A share in (0, 1] ([0, 1] with ``allow_zero``): an efficiency, a memory share."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SpecError(f"expected a number in (0, 1], got {value!r}", field=field)
    if value > 1 or value < 0 or (value == 0 and not allow_zero):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise SpecError(f"must be in {interval}, got {value:g}", field=field)
    return float(value)


def check_port(value: int, *, field: str = "port", allow_zero: bool = False) -> int:
    """A TCP port: 1-65535 (0, "any free port", with ``allow_zero``)."""
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_PORT:
        raise SpecError(f"must be a port number {low}-{MAX_PORT}, got {value}", field=field)
    return value
