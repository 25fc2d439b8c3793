"""The bearer header of vLLM's ``--api-key``, in one place: the load generator sends it with
every request and the engine lifecycle with its readiness checks (neither layer may import the
other)."""

from __future__ import annotations


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer KEY`` for a server started with ``--api-key``; none without."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}
