"""budgettune: measure and pick the chunked-prefill token budget for vLLM and SGLang."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__`` is read from the installed metadata on first use: importlib.metadata
    costs ~30 ms, which every ``import budgettune.…`` (and so ``budgettune --help``) would
    otherwise pay."""
    if name != "__version__":
        raise AttributeError(f"module 'budgettune' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("budgettune")
    except PackageNotFoundError:  # running from a source tree that was not installed
        found = "0.0.0+local"
    globals()["__version__"] = found
    return found
