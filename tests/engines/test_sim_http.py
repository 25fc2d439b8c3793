"""The embedded engine's HTTP/1.1 framing (h11 on asyncio streams) over raw loopback sockets:
HEAD then GET on one keep-alive connection, strict Content-Length, the body cap (413), chunked
request bodies, and the request and keep-alive timeouts that close a connection."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest

from budgettune.engines.embedded.http11 import ConnectionLimits, Exchange, serve_connection

SimStart = Callable[[list[str]], AbstractContextManager[tuple[str, object]]]


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def _read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One answer with a Content-Length body: (head, body); reads no further."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"closed before a whole head: {data!r}"
        data += more
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        more = sock.recv(65536)
        assert more
        rest += more
    return head, rest[:length]


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closed the connection (recv gives b''), at most ``seconds``."""
    started = time.monotonic()
    sock.settimeout(seconds)
    while True:
        if sock.recv(65536) == b"":
            return time.monotonic() - started


def test_head_then_get_on_one_keep_alive_connection(sim_url: str) -> None:
    with _connect(sim_url) as sock:
        sock.sendall(b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
        status, _, rest = head.partition(b"\r\n")
        assert status == b"HTTP/1.1 200 OK"
        assert rest.endswith(b"\r\n\r\n")  # and not one byte of body after the head
        declared = [line for line in rest.split(b"\r\n") if line.lower().startswith(b"content-")]
        assert b"content-length" in b" ".join(declared).lower()  # the GET answer's length
        # The next request on the same connection gets its own, whole answer.
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        head2, body = _read_answer(sock)
        assert head2.startswith(b"HTTP/1.1 200")
        assert json.loads(body)["data"][0]["id"] == "llama-3.1-8b"


def test_content_length_must_be_plain_digits(sim_url: str) -> None:
    for bad in (b"1_0", b"+10", b"0x10", b"10, 11"):
        with _connect(sim_url) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                + bad
                + b"\r\n\r\n"
                + b'{"prompt":[1]}'
            )
            head, body = _read_answer(sock)
            assert head.startswith(b"HTTP/1.1 400"), (bad, head)
            assert json.loads(body)["code"] == 400
            assert _closed_within(sock, 5) < 5


def test_declared_body_over_the_cap_is_refused_before_reading(sim_url: str) -> None:
    with _connect(sim_url) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
        )
        head, body = _read_answer(sock)
        assert head.startswith(b"HTTP/1.1 413")
        assert "over the limit" in json.loads(body)["message"]


def test_chunked_request_body_is_served(sim_url: str) -> None:
    payload = json.dumps({"prompt": list(range(12)), "max_tokens": 2}).encode()
    half = len(payload) // 2
    with _connect(sim_url) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n%s\r\n" % (half, payload[:half])
            + b"%x\r\n%s\r\n" % (len(payload) - half, payload[half:])
            + b"0\r\n\r\n"
        )
        head, body = _read_answer(sock)
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(body)["usage"]["prompt_tokens"] == 12


@pytest.mark.timing
def test_request_and_keep_alive_timeouts_close_the_connection(sim_factory: SimStart) -> None:
    with sim_factory(["--timeout-request", "0.4", "--timeout-keep-alive", "0.6"]) as (url, _):
        with _connect(url) as sock:  # a head that never ends
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            assert 0.3 < _closed_within(sock, 5) < 3
        with _connect(url) as sock:  # idle after an answer
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _ = _read_answer(sock)
            assert head.startswith(b"HTTP/1.1 200")
            assert 0.5 < _closed_within(sock, 5) < 3
        with _connect(url) as sock:  # busy is not idle: requests within the timeout keep it
            for _ in range(3):
                time.sleep(0.3)
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _read_answer(sock)[0].startswith(b"HTTP/1.1 200")


def test_a_streamed_body_over_the_cap_gets_413() -> None:
    """The cap counts bytes as they come, for chunked bodies that declare no length (a small cap
    here, on the same serve_connection the engine runs)."""

    async def echo(exchange: Exchange) -> bool:
        exchange.respond(200, exchange.request.body, content_type="text/plain")
        return True

    async def scenario() -> tuple[bytes, bytes]:
        limits = ConnectionLimits(max_body_bytes=1000)
        server = await asyncio.start_server(
            lambda r, w: serve_connection(r, w, echo, limits), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        answers = []
        try:
            for size in (1000, 1001):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                    + b"%x\r\n%s\r\n0\r\n\r\n"
                    % (size, b"a" * size)
                )
                answers.append(await reader.read())  # to the close (Connection: close)
                writer.close()
        finally:
            server.close()
        return answers[0], answers[1]

    within, over = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert within.startswith(b"HTTP/1.1 200") and within.endswith(b"a" * 1000)
    assert over.startswith(b"HTTP/1.1 413")


def _stream_events(url: str, body: bytes) -> list[dict[str, object]]:
    """The JSON events of one streamed completion (Connection: close, read to the end)."""
    with _connect(url) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        data = b""
        while more := sock.recv(65536):
            data += more
    return [json.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: {")]


def test_a_quoted_model_name_is_json_escaped_in_every_chunk(sim_factory: SimStart) -> None:
    """--served-model-name 'my"model' made every chunk invalid JSON ("bad SSE payload")."""
    name = 'my"model\\x'
    with sim_factory(["--served-model-name", name]) as (url, _):
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 3, "stream": True}).encode()
        events = _stream_events(url, body)
        assert len(events) == 3
        assert {event["model"] for event in events} == {name}
        info = json.loads(_get(url, "/server_info?config_format=json"))
        scheduler = info["vllm_config"]["scheduler_config"]
        assert (
            scheduler["max_num_batched_tokens"] is None or scheduler["max_num_batched_tokens"] > 0
        )


def _get(url: str, path: str) -> bytes:
    with _connect(url) as sock:
        sock.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        head, body = _read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200"), head
        return body


def test_a_body_nested_too_deep_is_a_400_not_a_500(sim_url: str) -> None:
    body = b"[" * 100_000
    with _connect(sim_url) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
        )
        head, answer = _read_answer(sock)
    assert head.startswith(b"HTTP/1.1 400"), head
    assert "nested too deep" in json.loads(answer)["message"]


def test_the_body_cap_follows_the_context(sim_factory: SimStart) -> None:
    """A body is buffered whole: the cap is a prompt that fills the context (32 bytes a token
    plus 64 KiB), so four 60 MB bodies are refused on their declared length."""
    from budgettune.engines.embedded.server import body_limit_bytes

    assert body_limit_bytes(131_072) == 64 * 1024 + 32 * 131_072
    with sim_factory(["--max-model-len", "4096"]) as (url, _):
        with _connect(url) as sock:
            sock.sendall(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                % (body_limit_bytes(4096) + 1)
            )
            head, _ = _read_answer(sock)
        assert head.startswith(b"HTTP/1.1 413"), head
