"""The load generator's API surface over real HTTP: the API key (sent on every request, a 401
refused in one line naming --api-key), chat completions with exact token counts, the closed loop
(never more than N in flight), and usage counted from the stream (no continuous_usage_stats
asked for unless wanted). Against the real embedded engine, and a tiny local server that
answers 401 and records what it was sent."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from typer.testing import CliRunner

from budgettune.app.client import without_secrets
from budgettune.app.requests import (
    ClientRequest,
    LaunchRequest,
    SloRequest,
    SweepRequest,
    TrafficRequest,
)
from budgettune.artifacts.results import load_results
from budgettune.artifacts.sweep_options import saved_options
from budgettune.cli import app
from budgettune.core.errors import UserError
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.external import ExternalEngine
from budgettune.engines.process import group_members
from budgettune.loadgen.client import CHAT_WORDS, Endpoint, prompt_text, request_body
from budgettune.loadgen.runner import LiveRecord, RunOptions, RunOutcome, Target, run_schedule
from budgettune.trace.schedule import Schedule

KEY = "sk-budgettune-test-4c1d"


def _schedule(targets: list[float], prompts: list[int], outputs: list[int]) -> Schedule:
    return Schedule(
        target_s=np.array(targets, dtype=np.float64),
        prompt_tokens=np.array(prompts, dtype=np.int64),
        output_tokens=np.array(outputs, dtype=np.int64),
    )


def _replay(
    schedule: Schedule, spec: LaunchSpec, options: RunOptions, *, api_key: str | None = None
) -> RunOutcome:
    async def scenario() -> tuple[RunOutcome, int | None]:
        async with SimEngine().launch(spec) as handle:
            target = Target(handle.url, handle.model, api_key)
            return await run_schedule(schedule, target, options), handle.pid

    outcome, pid = asyncio.run(scenario())
    assert pid is not None and not group_members(pid)
    return outcome


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers every /v1 path 401 (vLLM's body), /metrics 200, and records each request."""

    seen: ClassVar[list[tuple[str, str, str | None, bytes]]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        status, payload = (401, b'{"error":"Unauthorized"}')
        if not self.path.startswith("/v1"):
            status, payload = 200, b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def refusing_server() -> Iterator[tuple[str, list[tuple[str, str, str | None, bytes]]]]:
    seen: ClassVar[list[tuple[str, str, str | None, bytes]]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_key_sent_on_every_request_and_a_401_stops_the_run_naming_the_key(
    refusing_server: tuple[str, list[tuple[str, str, str | None, bytes]]],
) -> None:
    url, seen = refusing_server
    schedule = _schedule([0.0, 0.01, 0.02, 5.0], [8, 8, 8, 8], [3, 3, 3, 3])
    with pytest.raises(UserError) as caught:
        asyncio.run(run_schedule(schedule, Target(url, "m", KEY), RunOptions()))
    assert caught.value.field == "api_key"
    assert "401" in caught.value.message and "Unauthorized" in caught.value.message
    assert "--api-key" in (caught.value.hint or "")
    posts = [entry for entry in seen if entry[0] == "POST"]
    assert posts and all(path == "/v1/completions" for _, path, _, _ in posts)
    assert len(posts) < 4  # stopped at the first 401, not at the request 5 s later
    # every request carried the key: the completions and the /metrics scrape before them
    assert {auth for _, _, auth, _ in seen} == {f"Bearer {KEY}"}
    assert any(path == "/metrics" for _, path, _, _ in seen)
    # and the body asked for the final usage only, not for usage in every chunk
    body = json.loads(posts[0][3])
    assert body["stream_options"] == {"include_usage": True}


def test_external_server_refusing_the_key_is_a_user_error_naming_api_key(
    refusing_server: tuple[str, list[tuple[str, str, str | None, bytes]]],
) -> None:
    url, seen = refusing_server

    async def connect() -> None:
        async with ExternalEngine().launch(LaunchSpec(url=url)):
            pass

    with pytest.raises(UserError) as caught:
        asyncio.run(connect())
    assert caught.value.field == "api_key" and "missing API key" in caught.value.message
    assert seen[0][2] is None  # no key given, none sent


def test_cli_replay_against_a_refusing_server_prints_one_line_naming_api_key(
    budgettune_cmd: list[str],
    refusing_server: tuple[str, list[tuple[str, str, str | None, bytes]]],
    tmp_path: Path,
) -> None:
    url, seen = refusing_server
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"} | {"OPENAI_API_KEY": KEY}
    done = subprocess.run(
        [*budgettune_cmd, "replay", "--url", url, "--rate", "5", "--requests", "2",
         "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "--api-key" in errors[0] and "401" in errors[0], done.stderr
    assert KEY not in done.stderr and KEY not in done.stdout
    assert seen[0][2] == f"Bearer {KEY}"  # read from OPENAI_API_KEY


def test_launched_engine_demands_the_key_and_the_replay_sends_it(tmp_path: Path) -> None:
    spec = LaunchSpec(budget_tokens=256, api_key=KEY, log_path=tmp_path / "e.log")
    schedule = _schedule([0.0, 0.02, 0.04], [30, 40, 50], [4, 5, 6])
    outcome = _replay(schedule, spec, RunOptions(scrape_metrics=False), api_key=KEY)
    assert outcome.complete and all(live.record.ok for live in outcome.records)
    with pytest.raises(UserError) as caught:
        _replay(schedule, spec, RunOptions(scrape_metrics=False), api_key="wrong")
    assert caught.value.field == "api_key"
    assert KEY not in (tmp_path / "e.log").read_text()


def test_chat_endpoint_end_to_end_exact_token_counts(tmp_path: Path) -> None:
    prompts, outputs = [17, 64, 5, 130], [9, 1, 23, 12]
    schedule = _schedule([0.0, 0.03, 0.06, 0.09], prompts, outputs)
    spec = LaunchSpec(budget_tokens=128, log_path=tmp_path / "e.log")
    outcome = _replay(schedule, spec, RunOptions(endpoint=Endpoint.CHAT))
    assert outcome.complete
    for live, prompt, output in zip(outcome.records, prompts, outputs, strict=True):
        assert live.record.ok, live.record.error
        assert len(live.record.token_times_s) == output
        assert live.usage is not None
        assert (live.usage["prompt_tokens"], live.usage["completion_tokens"]) == (prompt, output)
        # one token per chunk: the role chunk counted nothing, nothing was settled at the end
        assert live.chunk_tokens.tolist() == [1] * output and live.record.merged_chunks == 0


def test_completions_count_tokens_from_the_stream_exactly_without_continuous_usage(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(5)
    n = 10
    outputs = [int(x) for x in rng.integers(1, 40, n)]
    schedule = _schedule(
        list(np.arange(n) * 0.02), [int(x) for x in rng.integers(10, 200, n)], outputs
    )
    spec = LaunchSpec(budget_tokens=256, log_path=tmp_path / "e.log")
    for continuous in (False, True):
        outcome = _replay(schedule, spec, RunOptions(continuous_usage=continuous))
        assert outcome.complete
        for live, output in zip(outcome.records, outputs, strict=True):
            assert live.record.ok and len(live.record.token_times_s) == output
            assert live.chunk_tokens.tolist() == [1] * output  # the engine: a token per chunk
            assert live.usage is not None and live.usage["completion_tokens"] == output


def _max_in_flight(records: list[LiveRecord]) -> int:
    """The most requests between their send and their stream's end at any one time."""
    events: list[tuple[float, int]] = []
    for live in records:
        assert live.finished_s is not None and live.finished_s >= live.record.sent_s
        events += [(live.record.sent_s, 1), (live.finished_s, -1)]
    in_flight = peak = 0
    for _, step in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at a tie
        in_flight += step
        peak = max(peak, in_flight)
    return peak


def test_closed_loop_keeps_at_most_n_in_flight_and_finishes_all(tmp_path: Path) -> None:
    n, concurrency = 14, 3
    # Arrival times an hour apart: an open loop would take 13 hours; the closed loop ignores them.
    targets = [3600.0 * i for i in range(n)]
    schedule = _schedule(targets, [40 + 7 * i for i in range(n)], [8 + i % 5 for i in range(n)])
    spec = LaunchSpec(budget_tokens=256, log_path=tmp_path / "e.log")
    outcome = _replay(schedule, spec, RunOptions(concurrency=concurrency, scrape_metrics=False))
    assert outcome.complete and len(outcome.records) == n
    assert all(live.record.ok for live in outcome.records)
    assert _max_in_flight(outcome.records) == concurrency
    assert outcome.duration_s < 60
    for live in outcome.records:
        # the target is when its slot freed: at or before the send, never an hour away
        assert 0 <= live.record.sent_s - live.record.target_s < 1.0
    check = outcome.selfcheck()
    assert check.concurrency == concurrency and check.target_rate_per_s is None
    assert check.sent == n and check.complete


def test_request_bodies_chat_words_and_usage_options() -> None:
    body = json.loads(request_body(Endpoint.COMPLETIONS, "m", [5, 6, 7], 9))
    assert body["stream_options"] == {"include_usage": True}
    assert "continuous_usage_stats" not in json.dumps(body)
    body = json.loads(request_body(Endpoint.COMPLETIONS, "m", [5], 9, continuous_usage=True))
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    chat = json.loads(request_body(Endpoint.CHAT, "m", list(range(10, 60)), 4))
    assert chat["messages"] == [{"role": "user", "content": prompt_text(list(range(10, 60)))}]
    assert (chat["max_tokens"], chat["ignore_eos"], chat["stream"]) == (4, True, True)
    assert "prompt" not in chat
    text = chat["messages"][0]["content"]
    assert len(text.split()) == 50 and len(text.encode()) == 4 * 50
    assert all(len(word.encode()) == 4 and word.startswith(" ") for word in CHAT_WORDS)


def test_the_recorded_command_hides_the_key() -> None:
    shown = without_secrets(
        ["budgettune", "replay", "--api-key", KEY, f"--api-key={KEY}", "-o", "x"]
    )
    assert shown == ("budgettune", "replay", "--api-key", "***", "--api-key=***", "-o", "x")


def test_api_key_never_saved_with_the_sweep_options() -> None:
    request = SweepRequest(
        slo=SloRequest("50ms", "1s", 99.0), profile=None, launch=LaunchRequest(engine="sim"),
        traffic=TrafficRequest(), budgets=None, align=256, goodput=False, baseline="auto",
        exhaustive=False, max_error_rate=0.5,
        client=ClientRequest(endpoint="chat", concurrency=4, api_key=KEY),
    )  # fmt: skip
    assert KEY not in repr(request)
    saved = saved_options(request.options())
    assert "api_key" not in saved and KEY not in json.dumps(saved)
    assert (saved["endpoint"], saved["concurrency"]) == ("chat", 4)
    restored = SweepRequest.from_options(saved)
    assert restored.client == ClientRequest(endpoint="chat", concurrency=4)


def test_cli_replay_closed_loop_chat_with_key_records_no_key(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [*budgettune_cmd, "replay", "--engine", "sim", "--budget", "256", "--requests", "9",
         "--prompt-dist", "fixed:40", "--output-dist", "fixed:5", "--concurrency", "2",
         "--endpoint", "chat", "--api-key", KEY, "--slo-itl", "1s", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "closed loop, 2 in flight" in done.stdout
    assert "TBT (ITL)" in done.stdout and "vs SLO" in done.stdout
    results = load_results(out)
    config = results.config
    assert (config["concurrency"], config["endpoint"], config["api_key_used"]) == (2, "chat", True)
    assert config["continuous_usage_stats"] is False and config["slo_tbt_s"] == 1.0
    point = results.points[0]
    assert point["completed"] == 9 and point["selfcheck"]["concurrency"] == 2
    assert results.command[results.command.index("--api-key") + 1] == "***"
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    assert KEY not in done.stdout + done.stderr


def test_cli_incompatible_and_unknown_client_options_are_one_line_errors(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    cases = [
        (["sweep", "--slo-itl", "50ms", "--engine", "sim", "--concurrency", "2", "--goodput"],
         "--goodput"),
        (["replay", "--engine", "sim", "--rate", "2", "--endpoint", "embeddings"], "--endpoint"),
        (["replay", "--engine", "sim", "--rate", "2", "--concurrency", "0"], "--concurrency"),
    ]  # fmt: skip
    for args, flag in cases:
        done = subprocess.run(
            [*budgettune_cmd, *args, "-o", str(tmp_path / "x")],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and flag in done.stderr, (args, done.stderr)
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_cli_sweep_closed_loop_with_key_records_the_loop_and_no_key(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "sweep"
    done = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "sim", "--slo-itl", "50ms", "--requests", "16",
         "--prompt-dist", "fixed:200", "--output-dist", "fixed:20", "--concurrency", "4",
         "--budgets", "256,512", "--baseline", "none", "--api-key", KEY, "-o", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "closed loop, 4 in flight" in " ".join(done.stderr.split())
    assert "TBT (ITL)" in done.stdout + done.stderr
    settings = json.loads((out / "sweep.json").read_text())
    assert (settings["concurrency"], settings["api_key_used"]) == (4, True)
    assert settings["options"]["concurrency"] == 4 and "api_key" not in settings["options"]
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


@pytest.mark.slow
def test_cli_profile_launches_the_engine_with_the_key_and_sends_it(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "prof.json"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"VLLM_API_KEY": KEY}
    done = subprocess.run(
        [*budgettune_cmd, "profile", "--engine", "sim", "--model", "llama-3.1-8b", "--repeats", "1",
         "--max-tokens", "512", "--max-batch", "4", "--contexts", "128", "-o", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    # The engine demanded the key read from VLLM_API_KEY; every probe carried it.
    assert done.returncode == 0, done.stderr
    for path in tmp_path.iterdir():
        assert KEY not in path.read_text(errors="replace"), path


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("abc\ndef", "a line break at character 4"),
        ("a\r\nX: 1", "a line break at character 2"),
        ("clé", "a non-ASCII character at character 3"),
        ("a\x00b", "a control character at character 2"),
    ],
)
def test_a_key_no_header_can_carry_is_refused_before_anything_starts(
    key: str, what: str, tmp_path: Path
) -> None:
    # Before: the header could not be sent, every health poll failed as if the server were
    # down, and the command waited out the whole health timeout (2 min on sim, 20 on vLLM).
    result = CliRunner().invoke(
        app, ["replay", "--engine", "sim", "--rate", "8", "--requests", "4", "--api-key", key,
              "-o", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"--api-key: the API key holds {what}" in " ".join(result.output.split())
    assert key not in result.output
