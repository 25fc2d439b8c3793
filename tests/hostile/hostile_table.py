"""Every hostile case, from the three tables, and grouped by command."""

from __future__ import annotations

import hostile_cases
import hostile_cases_files
import hostile_cases_runs
from hostile_cases import Case

CASES: list[Case] = [*hostile_cases.CASES, *hostile_cases_files.CASES, *hostile_cases_runs.CASES]


def by_command() -> dict[str, list[Case]]:
    """The cases grouped by command, in table order."""
    out: dict[str, list[Case]] = {}
    for case in CASES:
        out.setdefault(case.command, []).append(case)
    return out
