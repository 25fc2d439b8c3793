"""The embedded engine's API key, as vLLM's: /v1 paths answer 401 {"error": "Unauthorized"}
without ``Authorization: Bearer KEY``; /health, /metrics and /version stay open; the key comes
from --api-key or VLLM_API_KEY; budgettune's launcher passes it and its readiness check sends
it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import pytest

from budgettune.app.requests import ServeRequest
from budgettune.app.serve import server_config
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.process import group_members, launch_process
from budgettune.model.calibration import CalibrationChoice

SimStart = Callable[[list[str]], AbstractContextManager[tuple[str, object]]]
KEY = "sk-test-123"
COMPLETION = {"prompt": [1, 2, 3], "max_tokens": 2}
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _statuses(url: str, headers: dict[str, str]) -> dict[str, int]:
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        return {
            "completions": client.post("/v1/completions", json=COMPLETION).status_code,
            "chat": client.post("/v1/chat/completions", json=CHAT).status_code,
            "models": client.get("/v1/models").status_code,
            "health": client.get("/health").status_code,
            "metrics": client.get("/metrics").status_code,
            "version": client.get("/version").status_code,
        }


GUARDED = {"completions": 401, "chat": 401, "models": 401}
OPEN = {"health": 200, "metrics": 200, "version": 200}
SERVED = {"completions": 200, "chat": 200, "models": 200, **OPEN}


def test_key_guards_v1_only(sim_factory: SimStart) -> None:
    with sim_factory(["--api-key", KEY]) as (url, _):
        assert _statuses(url, {}) == {**GUARDED, **OPEN}
        assert _statuses(url, {"Authorization": "Bearer wrong"}) == {**GUARDED, **OPEN}
        assert _statuses(url, {"Authorization": KEY}) == {**GUARDED, **OPEN}  # no scheme
        assert _statuses(url, {"Authorization": f"Bearer {KEY}"}) == SERVED
        assert _statuses(url, {"Authorization": f"bearer {KEY}"}) == SERVED  # any case
        refused = httpx.post(f"{url}/v1/completions", json=COMPLETION, timeout=10)
        # vLLM's body, verbatim (vllm/entrypoints/openai/server_utils.py).
        assert refused.json() == {"error": "Unauthorized"}
        assert refused.headers["content-type"] == "application/json"


def test_key_from_vllm_api_key_and_none_without(
    sim_factory: SimStart, monkeypatch: pytest.MonkeyPatch
) -> None:
    with sim_factory([]) as (url, _):
        assert _statuses(url, {}) == SERVED
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    with sim_factory([]) as (url, _):
        assert _statuses(url, {})["completions"] == 401
        assert _statuses(url, {"Authorization": f"Bearer {KEY}"}) == SERVED
    with sim_factory(["--api-key", "other"]) as (url, _):  # the flag wins, as in vLLM
        assert _statuses(url, {"Authorization": "Bearer other"}) == SERVED


def test_launcher_passes_the_key_and_keeps_it_off_the_command_line() -> None:
    spec = LaunchSpec(api_key=KEY, health_timeout_s=60)

    async def scenario() -> tuple[int, int, tuple[str, ...], int]:
        async with launch_process(SimEngine(), spec) as handle:  # readiness sent the key
            async with httpx.AsyncClient(base_url=handle.url, timeout=10) as client:
                without = await client.post("/v1/completions", json=COMPLETION)
                with_key = await client.post(
                    "/v1/completions",
                    json=COMPLETION,
                    headers={"Authorization": f"Bearer {KEY}"},
                )
            return without.status_code, with_key.status_code, handle.command, handle.pid

    without, with_key, command, pid = asyncio.run(scenario())
    assert (without, with_key) == (401, 200)
    assert KEY not in " ".join(command)
    assert not group_members(pid)


def test_serve_config_carries_the_key() -> None:
    request = ServeRequest(
        engine="sim", budget="512", max_num_seqs=8, model="llama-3.1-8b", gpu="h100-sxm",
        dtype="bfloat16", profile=None, max_model_len=None, gpu_memory_utilization=0.9,
        block_size=16, long_prefill_token_threshold=0, host="127.0.0.1", port=8000,
        served_model_name=None, stream_interval=1, time_scale=1.0, emission_log=None,
        api_key=KEY, calibration=CalibrationChoice(compute_efficiency=0.5, overhead_ms=1.0),
    )  # fmt: skip
    config = server_config(request)
    assert config.api_key == KEY
    assert config.calibration == request.calibration  # the calibration group, passed whole
    assert KEY not in repr(config)
