"""The embedded engine over real HTTP: endpoints, exact token counts, streaming format,
vLLM-style errors, merged chunks, aborts, and its /metrics counters."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import httpx
import pytest

from budgettune.engines.embedded.validate import ApiError, prompt_token_count
from budgettune.loadgen.server_metrics import parse_prometheus

SimStart = Callable[[list[str]], AbstractContextManager[tuple[str, object]]]


def _events(url: str, body: dict[str, object]) -> list[dict[str, object] | str]:
    """POST a streaming completion; every SSE payload, parsed ('[DONE]' kept as text)."""
    out: list[dict[str, object] | str] = []
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_endpoints_answer_like_vllm(sim_url: str) -> None:
    assert httpx.get(f"{sim_url}/health").status_code == 200
    models = httpx.get(f"{sim_url}/v1/models").json()
    assert models["data"][0]["id"] == "llama-3.1-8b"
    assert models["data"][0]["max_model_len"] == 4096
    assert "version" in httpx.get(f"{sim_url}/version").json()
    metrics = httpx.get(f"{sim_url}/metrics").text
    for name in (
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:iteration_tokens_total_bucket",
        "vllm:request_queue_time_seconds_bucket",
        "vllm:num_preemptions_total",
        'vllm:request_success_total{finished_reason="length"',
    ):
        assert name in metrics


def test_stream_gives_exact_tokens_usage_and_done(sim_url: str) -> None:
    events = _events(
        sim_url,
        {
            "prompt": list(range(10, 110)),
            "max_tokens": 7,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    assert events[-1] == "[DONE]"
    final = events[-2]
    assert isinstance(final, dict) and final["choices"] == []
    assert final["usage"] == {"prompt_tokens": 100, "total_tokens": 107, "completion_tokens": 7}
    chunks = [e for e in events[:-2] if isinstance(e, dict)]
    assert len(chunks) == 7
    assert [c["usage"]["completion_tokens"] for c in chunks] == list(range(1, 8))  # type: ignore[index]
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]  # type: ignore[index]
    assert reasons == [None] * 6 + ["length"]


def test_non_stream_and_text_prompt_token_rule(sim_url: str) -> None:
    response = httpx.post(
        f"{sim_url}/v1/completions", json={"prompt": "abcdefghi", "max_tokens": 3}, timeout=30
    )
    assert response.status_code == 200
    body = response.json()
    # 9 UTF-8 bytes -> ceil(9 / 4) = 3 prompt tokens.
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 6, "completion_tokens": 3}
    assert body["choices"][0]["finish_reason"] == "length"
    assert prompt_token_count("é" * 4) == 2  # 8 bytes
    assert prompt_token_count([[1, 2, 3]]) == 3  # a one-prompt batch is unwrapped
    with pytest.raises(ApiError, match="batched"):
        prompt_token_count([[1], [2]])


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"prompt": [1] * 100, "max_tokens": 4000}, 400, "maximum context length is 4096"),
        ({"prompt": [1, 2], "model": "gpt-9"}, 404, "The model `gpt-9` does not exist."),
        ({"prompt": []}, 400, "Prompt cannot be empty"),
        ({"prompt": [1], "max_tokens": 0}, 400, "max_tokens must be at least 1"),
        ({"prompt": [1], "stream_options": {"include_usage": True}}, 400, "stream=True"),
        ({"prompt": [1], "stream": True, "stream_options": "x"}, 400, "valid dictionary"),
        ({"prompt": [[1], [2]]}, 400, "batched prompts"),
        ({"max_tokens": 2}, 400, "'prompt' is required"),
    ],
)
def test_bad_requests_get_vllm_style_json_errors(
    sim_url: str, body: dict[str, object], status: int, message: str
) -> None:
    response = httpx.post(f"{sim_url}/v1/completions", json=body, timeout=10)
    assert response.status_code == status
    error = response.json()
    assert error["object"] == "error" and error["code"] == status
    assert message in error["message"]


def test_malformed_http_and_json_never_crash_the_server(sim_url: str) -> None:
    response = httpx.post(f"{sim_url}/v1/completions", content=b"{not json", timeout=10)
    assert response.status_code == 400 and "Invalid JSON" in response.json()["message"]
    assert httpx.get(f"{sim_url}/v1/completions").status_code == 405
    assert httpx.get(f"{sim_url}/nope").status_code == 404
    host, port = sim_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        assert sock.recv(200).startswith(b"HTTP/1.1 400")
    assert httpx.get(f"{sim_url}/health").status_code == 200


def test_stream_interval_merges_tokens_into_chunks(sim_factory: SimStart) -> None:
    with sim_factory(["--stream-interval", "4"]) as (url, _):
        events = _events(
            url,
            {
                "prompt": [5] * 20,
                "max_tokens": 10,
                "stream": True,
                "stream_options": {"continuous_usage_stats": True},
            },
        )
    counts = [e["usage"]["completion_tokens"] for e in events if isinstance(e, dict)]  # type: ignore[index]
    # First token at once, then every 4, and the rest with the last one.
    assert counts == [1, 5, 9, 10]
    assert events[-1] == "[DONE]"


def _aborts(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    match = re.search(r'vllm:request_success_total\{finished_reason="abort"[^}]*\} (\S+)', text)
    assert match is not None
    return float(match.group(1))


def test_client_hanging_up_aborts_the_request(sim_url: str) -> None:
    aborts_before = _aborts(sim_url)
    body = {"prompt": [3] * 50, "max_tokens": 3000, "stream": True}
    with httpx.stream("POST", f"{sim_url}/v1/completions", json=body, timeout=30) as response:
        for _ in response.iter_lines():
            break  # read one event, then drop the connection
    running = 1.0
    for _ in range(200):  # the engine notices at its next token for the request
        counters = parse_prometheus(httpx.get(f"{sim_url}/metrics").text).counters
        running = counters["vllm:num_requests_running"]
        if running == 0:
            break
        time.sleep(0.01)
    assert running == 0
    assert _aborts(sim_url) == aborts_before + 1
    assert httpx.get(f"{sim_url}/health").status_code == 200


def test_metrics_count_requests_and_tokens(sim_factory: SimStart) -> None:
    with sim_factory([]) as (url, _):
        for max_tokens in (2, 5):
            _events(url, {"prompt": [9] * 30, "max_tokens": max_tokens, "stream": True})
        snapshot = parse_prometheus(httpx.get(f"{url}/metrics").text)
    assert snapshot.counters["vllm:generation_tokens_total"] == 7
    assert snapshot.counters["vllm:prompt_tokens_total"] == 60
    assert snapshot.histograms["vllm:time_to_first_token_seconds"].count == 2
    assert snapshot.histograms["vllm:inter_token_latency_seconds"].count == 5  # 1 + 4 gaps
    assert snapshot.histograms["vllm:request_queue_time_seconds"].count == 2
