"""The facts a replay records about the engine it measured (results.json ``engine``, a sweep
point's ``engine``), as one type: read by attribute by the CLI and the sweep, written to JSON
only by :meth:`EngineFacts.to_json`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from budgettune.engines.base import EngineHandle, LaunchSpec


@dataclass(slots=True, frozen=True)
class EngineFacts:
    """Which engine served a replay and how it was launched. ``crashed`` (why the engine is
    gone) and ``log_tail`` (its last log lines) are set only when it exited during the run."""

    name: str
    version: str
    url: str
    model: str
    budget_tokens: int | None
    chunked_prefill: bool
    max_num_seqs: int | None
    pid: int | None
    command: tuple[str, ...]
    log: str | None
    startup_s: float
    crashed: str | None = None
    log_tail: str | None = None
    decided_by: tuple[tuple[str, str], ...] = ()  # (setting, who set it), see decided_by()

    @classmethod
    def of(cls, handle: EngineHandle, spec: LaunchSpec) -> EngineFacts:
        """The handle's facts and the budget settings the engine was launched with."""
        return cls(
            name=handle.engine,
            version=handle.version,
            url=handle.url,
            model=handle.model,
            budget_tokens=spec.budget_tokens,
            chunked_prefill=spec.chunked_prefill,
            max_num_seqs=spec.max_num_seqs,
            pid=handle.pid,
            command=tuple(handle.command),
            log=str(handle.log_path) if handle.log_path else None,
            startup_s=round(handle.startup_s, 3),
            decided_by=decided_by(spec),
        )

    def with_crash(self, crashed: str, log_tail: str) -> EngineFacts:
        """These facts for an engine that exited during the run."""
        return replace(self, crashed=crashed, log_tail=log_tail)

    def to_json(self, *, log_tail: bool = True) -> dict[str, object]:
        """The JSON record (results.json's ``engine``); ``crashed`` and ``log_tail`` appear only
        for a crashed engine, and ``log_tail=False`` leaves the tail out (a point's copy)."""
        doc: dict[str, object] = {
            "name": self.name,
            "version": self.version,
            "url": self.url,
            "model": self.model,
            "budget_tokens": self.budget_tokens,
            "chunked_prefill": self.chunked_prefill,
            "max_num_seqs": self.max_num_seqs,
            "pid": self.pid,
            "command": list(self.command),
            "log": self.log,
            "startup_s": self.startup_s,
            "decided_by": dict(self.decided_by),
        }
        if self.crashed is not None:
            doc["crashed"] = self.crashed
        if log_tail and self.log_tail is not None:
            doc["log_tail"] = self.log_tail
        return doc


def decided_by(spec: LaunchSpec) -> tuple[tuple[str, str], ...]:
    """Who set each scheduling setting of a launch: budgettune (the budget under test), the
    user (each option given), or the engine (its own default; prefix caching is then passed as
    the engine's default, so that no install's own setting decides it). Settings the user left
    alone are otherwise not passed to the engine at all."""
    if not spec.chunked_prefill:
        budget = "budgettune: chunking off (--budget none)"
    elif spec.budget_tokens is not None:
        budget = "budgettune: the budget under test"
    else:
        budget = "the engine's default"
    found = [
        ("budget_tokens", budget),
        (
            "prefix_caching",
            spec.prefix_caching_by
            or f"budgettune: {'on' if spec.prefix_caching else 'off'}, the launch's own setting",
        ),
    ]
    given = {
        "max_num_seqs": spec.max_num_seqs,
        "max_model_len": spec.max_model_len,
        "tensor_parallel_size": spec.tensor_parallel_size,
        "gpu_memory_utilization": spec.gpu_memory_utilization,
        "dtype": spec.dtype,
    }
    for name, value in given.items():
        who = "the engine's default" if value is None else f"the user: --{name.replace('_', '-')}"
        found.append((name, who))
    return tuple(found)
