"""Engines by name. Add an engine with one line in ``ENGINES``; the error for an unknown name
lists the valid ones."""

from __future__ import annotations

from collections.abc import Callable

from budgettune.core.errors import SpecError
from budgettune.engines.base import Engine
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.external import ExternalEngine
from budgettune.engines.sglang import SglangEngine
from budgettune.engines.vllm import VllmEngine

ENGINES: dict[str, Callable[[], Engine]] = {
    "sim": SimEngine,
    "external": ExternalEngine,
    "vllm": VllmEngine,
    "sglang": SglangEngine,
}


def engine_names() -> list[str]:
    return list(ENGINES)


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (case-insensitive). Raises SpecError (field engine) listing the
    valid names."""
    key = name.strip().lower()
    if key not in ENGINES:
        raise SpecError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}", field="engine")
    return ENGINES[key]()
