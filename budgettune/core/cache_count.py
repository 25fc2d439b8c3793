"""A prefix cache's count over a run: prompt tokens looked up and, of them, tokens found cached,
as the engines count them (vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits``). The same
value comes from the simulator, the built-in engine and a real engine's /metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from budgettune.core.errors import SpecError


@dataclass(slots=True, frozen=True)
class PrefixCacheCount:
    """``queries_tokens`` looked up, ``hits_tokens`` of them found cached (both >= 0, hits at
    most queries)."""

    queries_tokens: int
    hits_tokens: int

    def __post_init__(self) -> None:
        if not 0 <= self.hits_tokens <= self.queries_tokens:
            raise SpecError(
                f"hits {self.hits_tokens} must be within 0 and the queries {self.queries_tokens}",
                field="prefix_cache",
            )

    @property
    def hit_share(self) -> float | None:
        """Hits over queries (0-1); None when nothing was looked up."""
        return self.hits_tokens / self.queries_tokens if self.queries_tokens else None

    def to_json(self) -> dict[str, Any]:
        share = self.hit_share
        return {
            "queries_tokens": self.queries_tokens,
            "hits_tokens": self.hits_tokens,
            "hit_share": None if share is None else round(share, 4),
        }

    @classmethod
    def from_counters(cls, counters: Mapping[str, float]) -> PrefixCacheCount | None:
        """From a replay's server counters (``selfcheck.server``); None when the server does not
        count its prefix cache."""
        queries = counters.get("prefix_cache_queries_total")
        if queries is None:
            return None
        hits = counters.get("prefix_cache_hits_total", 0.0)
        return cls(round(queries), round(min(hits, queries)))
