"""How sure a verdict against an SLO is, as one word (no numpy here: the CLI's light paths and
the typed sweep point import it)."""

from __future__ import annotations

from enum import StrEnum


class Confidence(StrEnum):
    """``clear`` when the percentile's whole 95% interval lies on one side of the SLO, else
    ``marginal`` (see :mod:`budgettune.core.intervals`)."""

    CLEAR = "clear"
    MARGINAL = "marginal"
