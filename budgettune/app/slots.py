"""Where a parallel sweep's verifications run: slots. On vLLM, SGLang and TensorRT-LLM a slot is
a set of ``--tensor-parallel-size`` GPUs (``--gpus``, default every GPU nvidia-smi lists), its
engine started with those in ``CUDA_VISIBLE_DEVICES``; on the built-in engine a slot is a
process. Each slot's load generator runs in a process of its own, pinned to a CPU of its own where
the machine has enough of them (one per client, the rest for the engines), so clients never
share a core.

Errors name the request's field (``parallel``, ``gpus``); the CLI maps them to flags.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from budgettune.core.errors import SpecError
from budgettune.core.limits import check_count
from budgettune.core.units import MAX_LIST_ITEMS

GPU_ENGINES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True, slots=True)
class Slot:
    """One place a verification runs. ``gpus``: the CUDA devices of its engine (empty: the
    built-in engine, or a CPU build); ``client_cpus``/``engine_cpus``: the CPUs its load
    generator and its engine are pinned to (empty: not pinned)."""

    index: int
    gpus: tuple[int, ...] = ()
    client_cpus: tuple[int, ...] = ()
    engine_cpus: tuple[int, ...] = ()

    def engine_env(self) -> dict[str, str]:
        """The variables its engine starts with: its GPUs, when it has any."""
        return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, self.gpus))} if self.gpus else {}

    def describe(self) -> str:
        """e.g. "slot 1: GPUs 2,3; client on CPU 1"."""
        parts = [f"GPUs {','.join(map(str, self.gpus))}"] if self.gpus else []
        if self.client_cpus:
            parts.append(f"client on CPU {','.join(map(str, self.client_cpus))}")
        return f"slot {self.index}" + (f": {'; '.join(parts)}" if parts else "")


@dataclass(frozen=True, slots=True)
class SlotPlan:
    """The slots of a sweep and, in words, how they were made (printed before it starts)."""

    slots: tuple[Slot, ...]
    how: str

    @property
    def parallel(self) -> int:
        return len(self.slots)


def parse_gpus(text: str | None) -> tuple[int, ...] | None:
    """``--gpus 0,1,2,3`` as device indices; None when not given. Raises SpecError."""
    if text is None or not text.strip():
        return None
    try:
        found = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SpecError(
            f"expected comma-separated GPU indices such as 0,1,2,3, got {text!r}", field="gpus"
        ) from None
    if any(g < 0 for g in found) or len(set(found)) != len(found):
        raise SpecError(f"indices must be distinct and >= 0, got {text!r}", field="gpus")
    return found


def plan_slots(
    engine: str,
    *,
    parallel: int | None,
    gpus: tuple[int, ...] | None,
    tensor_parallel: int,
    visible_gpus: Sequence[int],
    cpus: Sequence[int] | None = None,
) -> SlotPlan:
    """The slots for ``engine``: ``parallel`` of them (None: one per GPU set on vLLM and SGLang,
    one on the built-in engine). ``visible_gpus`` is what nvidia-smi lists (the default of
    ``gpus``); ``cpus`` the CPUs this process may use (default: its affinity). Raises SpecError
    for a plan that cannot run: an external server (one budget at a time), more slots than the
    GPUs hold, GPUs not visible."""
    if parallel is not None and parallel < 1:
        raise SpecError(f"must be 1 or more, got {parallel}", field="parallel")
    if parallel is not None:  # a slot verifies one budget, and a sweep has at most this many
        check_count(parallel, field="parallel", maximum=MAX_LIST_ITEMS)
    if engine == "external":
        if parallel not in (None, 1):
            raise SpecError(
                "a server you run is one engine at one budget: it cannot verify several at once",
                field="parallel",
            )
        return SlotPlan((Slot(0),), "one server (--engine external)")
    cpus = tuple(sorted(os.sched_getaffinity(0) if cpus is None else cpus))
    tp = max(1, tensor_parallel)
    if engine in GPU_ENGINES and (gpus is not None or visible_gpus):
        chosen = gpus if gpus is not None else tuple(visible_gpus)
        missing = [g for g in chosen if visible_gpus and g not in visible_gpus]
        if missing:
            raise SpecError(
                f"GPU {missing[0]} is not among those nvidia-smi lists "
                f"({', '.join(map(str, visible_gpus))})",
                field="gpus",
            )
        sets = [chosen[i : i + tp] for i in range(0, len(chosen) - tp + 1, tp)]
        if not sets:
            raise SpecError(
                f"{len(chosen)} GPU(s) cannot hold one engine of --tensor-parallel-size {tp}",
                field="gpus",
            )
        count = parallel or len(sets)
        if count > len(sets):
            raise SpecError(
                f"{len(chosen)} GPU(s) in sets of {tp} make {len(sets)} slot(s), not {count}",
                field="parallel",
            )
        slots = [Slot(i, gpus=tuple(sets[i])) for i in range(count)]
        how = f"{count} slot(s) of {tp} GPU(s) each ({', '.join(s.describe() for s in slots)})"
    else:
        if gpus is not None:
            raise SpecError(f"applies to vLLM and SGLang, not --engine {engine}", field="gpus")
        count = parallel or 1
        slots = [Slot(i) for i in range(count)]
        what = "the built-in engine" if engine == "sim" else "no GPU visible"
        how = f"{count} slot(s), one process each ({what})"
    return _pinned(slots, cpus, how)


def _pinned(slots: list[Slot], cpus: tuple[int, ...], how: str) -> SlotPlan:
    """Each slot's client on a CPU of its own and the engines on the rest, when there are at
    least two CPUs per slot; else no pinning (said in ``how``). One slot is never pinned: the
    sweep's own process is its client, as without --parallel."""
    if len(slots) == 1:
        return SlotPlan(tuple(slots), how)
    if len(cpus) < 2 * len(slots):
        return SlotPlan(
            tuple(slots),
            f"{how}; clients not pinned: {len(cpus)} CPU(s) cannot give each of "
            f"{len(slots)} clients a core of its own beside the engines",
        )
    engine_cpus = cpus[len(slots) :]
    pinned = tuple(
        Slot(s.index, s.gpus, client_cpus=(cpus[s.index],), engine_cpus=engine_cpus) for s in slots
    )
    return SlotPlan(pinned, f"{how}; each client on a CPU of its own, engines on the rest")
