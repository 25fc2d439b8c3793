"""Engines by name. Add an engine with one line in ``ENGINES``; the error for an unknown name
lists the valid ones."""

from __future__ import annotations

from collections.abc import Callable

from budgettune.core.errors import SpecError
from budgettune.engines.base import ConfigFileKeys, Engine, PrefixCachingDefault
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.external import ExternalEngine
from budgettune.engines.sglang import SglangEngine
from budgettune.engines.trtllm import TrtllmEngine
from budgettune.engines.vllm import VllmEngine

ENGINES: dict[str, Callable[[], Engine]] = {
    "sim": SimEngine,
    "external": ExternalEngine,
    "vllm": VllmEngine,
    "sglang": SglangEngine,
    "trtllm": TrtllmEngine,
}


def check_engine_args(name: str, args: tuple[str, ...]) -> None:
    """Refuse, before anything is launched, pass-through arguments that repeat a flag
    budgettune sets on engine ``name`` (UserError, field ``engine_arg``)."""
    from budgettune.engines import sglang, vllm
    from budgettune.engines.embedded import engine as embedded
    from budgettune.engines.served import check_passthrough

    managed = {"sim": embedded.MANAGED_FLAGS, "vllm": vllm.MANAGED_FLAGS,
               "sglang": sglang.MANAGED_FLAGS}.get(name)  # fmt: skip
    if managed is not None:
        check_passthrough(args, managed, name, abbreviations=name != "sim")


def prefix_caching_default(name: str) -> PrefixCachingDefault | None:
    """Whether engine ``name`` caches prefixes when not told, and why; None for a server
    budgettune does not start (external: it runs as its owner set it)."""
    from budgettune.engines import sglang, trtllm, vllm
    from budgettune.engines.embedded import engine as embedded

    modules = {"sim": embedded, "vllm": vllm, "sglang": sglang, "trtllm": trtllm}
    module = modules.get(name)
    return None if module is None else module.PREFIX_CACHING


def config_file_keys(name: str) -> ConfigFileKeys | None:
    """How engine ``name`` reads the user's ``--engine-config`` (its own ``--config`` YAML), or
    None when it takes none: vLLM, SGLang, and the built-in engine, which reads vLLM's keys (the
    ones it models) from the same file."""
    from budgettune.engines import sglang, vllm

    return {"vllm": vllm.CONFIG_KEYS, "sim": vllm.CONFIG_KEYS, "sglang": sglang.CONFIG_KEYS}.get(
        name
    )


def budget_seqs_rule(name: str) -> Callable[[int, int], str | None] | None:
    """Engine ``name``'s rule on a budget beside a given max-num-seqs: (budget, seqs) -> why it
    refuses them, or None when it takes them; None for an engine without one. vLLM's, and the
    built-in engine's, which follows vLLM."""
    from budgettune.engines import vllm

    return vllm.budget_seqs_refusal if name in ("vllm", "sim") else None


def engine_names() -> list[str]:
    return list(ENGINES)


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (case-insensitive). Raises SpecError (field engine) listing the
    valid names."""
    key = name.strip().lower()
    if key not in ENGINES:
        raise SpecError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}", field="engine")
    return ENGINES[key]()
