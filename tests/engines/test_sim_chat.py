"""/v1/chat/completions on the embedded engine over real HTTP: vLLM's chunk format (the role
chunk first, delta.content after, finish and stop reason on the last, the usage chunk), exact
token counts from the concatenated message contents, and vLLM's max_tokens rules."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from budgettune.engines.embedded.validate import ApiError, chat_prompt_tokens

Event = dict[str, object] | str


def _chat_events(url: str, body: dict[str, object]) -> list[Event]:
    out: list[Event] = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"] == "text/event-stream"
        for line in response.iter_lines():
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


MESSAGES = [
    {"role": "system", "content": "You are terse."},  # 14 bytes
    {"role": "user", "content": [{"type": "text", "text": "héllo"}, {"type": "text", "text": "!"}]},
    {"role": "assistant", "content": None},
    {"role": "user", "content": "x" * 101},
]
MESSAGE_BYTES = 14 + 6 + 1 + 101  # "é" is two bytes


def test_chat_stream_is_vllms_format_with_exact_counts(sim_url: str) -> None:
    events = _chat_events(
        sim_url,
        {
            "messages": MESSAGES,
            "max_completion_tokens": 5,
            "max_tokens": 99,  # vLLM prefers max_completion_tokens
            "min_tokens": 5,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if isinstance(e, dict)]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1 and str(chunks[0]["id"]).startswith("chatcmpl-")
    role, *tokens, usage = chunks
    assert role["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert len(tokens) == 5
    choices = [t["choices"][0] for t in tokens]  # type: ignore[index]
    assert all(c["delta"]["content"] == " tok" for c in choices)
    assert [c["finish_reason"] for c in choices] == [None] * 4 + ["length"]
    assert "stop_reason" not in choices[0] and choices[-1]["stop_reason"] is None
    prompt = math.ceil(MESSAGE_BYTES / 4)
    assert usage["choices"] == []
    assert usage["usage"] == {"prompt_tokens": prompt, "total_tokens": prompt + 5,
                              "completion_tokens": 5}  # fmt: skip
    assert chat_prompt_tokens(MESSAGES) == prompt


def test_chat_continuous_usage_counts_from_zero(sim_url: str) -> None:
    events = _chat_events(
        sim_url,
        {
            "messages": [{"role": "user", "content": "a" * 40}],
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"continuous_usage_stats": True},
        },
    )
    counts = [e["usage"]["completion_tokens"] for e in events if isinstance(e, dict)]  # type: ignore[index]
    assert counts == [0, 1, 2, 3]
    assert {e["usage"]["prompt_tokens"] for e in events if isinstance(e, dict)} == {10}  # type: ignore[index]


def test_chat_non_stream_answer(sim_url: str) -> None:
    response = httpx.post(
        f"{sim_url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "z" * 4088 * 4}]},  # 4088 tokens
        timeout=30,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": " tok" * 8}
    assert choice["finish_reason"] == "length"
    # No max_tokens: vLLM's limit is the context left, 4096 - 4088.
    assert body["usage"] == {"prompt_tokens": 4088, "total_tokens": 4096, "completion_tokens": 8}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": []}, "non-empty list"),
        ({"messages": [{"content": "a"}]}, "'role'"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "text content"),
        ({"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}, "at least 1"),
        ({"messages": [{"role": "user", "content": "a"}], "max_tokens": 2, "min_tokens": 3},
         "min_tokens must be less than or equal to max_tokens=2, got 3."),
        ({"messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 5000},
         "maximum context length is 4096"),
        ({"messages": [{"role": "user", "content": "a"}], "stream_options": {}}, "stream=True"),
    ],
)  # fmt: skip
def test_bad_chat_requests_get_vllm_style_errors(
    sim_url: str, body: dict[str, object], message: str
) -> None:
    response = httpx.post(f"{sim_url}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 400
    error = response.json()
    assert error["object"] == "error" and message in error["message"]


def test_chat_prompt_rule_refuses_what_it_cannot_count() -> None:
    assert chat_prompt_tokens([{"role": "user", "content": ""}]) == 1  # at least one token
    with pytest.raises(ApiError, match="text content"):
        chat_prompt_tokens([{"role": "user", "content": [{"type": "input_audio"}]}])
