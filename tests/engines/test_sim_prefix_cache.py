"""The embedded engine's prefix cache over real HTTP: keys from what each request sent (token
ids or text), vLLM's counters on /metrics, and nothing cached with caching off."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx

from budgettune.engines.embedded.prefix_keys import block_keys
from budgettune.loadgen.server_metrics import parse_prometheus

SimStart = Callable[[list[str]], AbstractContextManager[tuple[str, object]]]


def _complete(url: str, body: dict[str, object], path: str = "/v1/completions") -> None:
    response = httpx.post(f"{url}{path}", json={"max_tokens": 2, **body}, timeout=30)
    assert response.status_code == 200, response.text


def _counters(url: str) -> tuple[float, float]:
    found = parse_prometheus(httpx.get(f"{url}/metrics", timeout=10).text).counters
    return found["vllm:prefix_cache_queries_total"], found["vllm:prefix_cache_hits_total"]


SHARED = list(range(10, 110))  # 100 ids: 6 full blocks of 16


def test_shared_ids_and_text_hit_as_vllm_counts_them(sim_factory: SimStart) -> None:
    with sim_factory(["--max-num-batched-tokens", "512"]) as (url, _):
        _complete(url, {"prompt": SHARED + [7] * 50})
        _complete(url, {"prompt": SHARED + [8] * 50})
        assert _counters(url) == (300.0, 96.0)
        # Text: a token is 4 bytes, a block 64; 700 shared bytes are 10 full blocks.
        shared_text = "a" * 700
        chat = "/v1/chat/completions"
        _complete(url, {"messages": [{"role": "user", "content": shared_text + "x" * 300}]}, chat)
        _complete(url, {"messages": [{"role": "user", "content": shared_text + "y" * 300}]}, chat)
        assert _counters(url) == (300.0 + 2 * 250, 96.0 + 160)


def test_no_enable_prefix_caching_caches_nothing(sim_factory: SimStart) -> None:
    with sim_factory(["--no-enable-prefix-caching"]) as (url, _):
        _complete(url, {"prompt": SHARED})
        _complete(url, {"prompt": SHARED})
        assert _counters(url) == (0.0, 0.0)


def test_block_keys_are_chained() -> None:
    a = block_keys(tuple(range(48)), 16)
    b = block_keys(tuple(range(32)) + (99,) * 16, 16)
    c = block_keys((0,) * 16 + tuple(range(16, 48)), 16)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]
    assert c[1] != a[1] and c[2] != a[2]  # same block content after a different block
    assert block_keys(b"z" * 130, 16) == block_keys(b"z" * 128, 16)  # 2 blocks of 64 bytes
