"""The behaviour table, engine and client groups: every launch option that `sweep`, `replay` and
`profile` take, and the load generator's options that shape a request, given on the command line,
arriving where they act. That is the engine's command line and environment, as
a stand-in vLLM records them (the built-in engine behind vLLM's command line), every request it
received (its path, its body, the key), the options the run saved (sweep.json, read by
--resume) and, for `sweep`, the vllm.yaml it writes: what the user set, so that the config
starts the engine as it was measured. One run of each command carries every option at once,
and each row of the table is checked on it. A value lost between the flag and the engine fails
its row by name. The traffic, SLO and calibration groups ride on the same sweep: each row
shows its value where it acts (every request the engine received, the verdict, the predictions'
source in recommendation.json and the report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

# vLLM's command line onto the built-in engine, after writing down what it was started with.
# The flags the built-in engine has no use for are vLLM's own and are recorded before they go.
RECORDING_VLLM = """
    import json, os, runpy, sys
    args = sys.argv[1:]
    with open(os.environ["TABLE_LOG"], "a") as log:
        env = {name: os.environ.get(name) for name in ("TABLE_ENV", "VLLM_API_KEY")}
        log.write(json.dumps({"argv": args, "env": env}) + "\\n")
    takes_value = {"--tensor-parallel-size": 1, "--enable-prefix-caching": 0,
                   "--no-enable-prefix-caching": 0, "--config": 1}
    served, i = [], 0
    while i < len(args):
        if args[i] in takes_value:
            i += 1 + takes_value[args[i]]
            continue
        served.append(args[i])
        i += 1
    # Every generation request as it arrived: its path, its body, and whether it carried the key.
    from budgettune.engines.embedded import app as sim_app
    original = sim_app.SimApp._generate
    async def recorded(self, exchange, endpoint):
        request = exchange.request
        keyed = request.headers.get("authorization") == "Bearer " + os.environ["TABLE_KEY"]
        with open(os.environ["TABLE_HTTP"], "a") as http:
            http.write(json.dumps({"path": request.path, "keyed": keyed,
                                   "body": json.loads(request.body)}) + "\\n")
        return await original(self, exchange, endpoint)
    sim_app.SimApp._generate = recorded
    sys.argv = ["sim_server", *served]
    runpy.run_module("budgettune.engines.embedded", run_name="__main__")
"""

KEY = "table-key-0451"
ENGINE_CONFIG = str(Path(__file__).with_name("engine-config.yaml").resolve())


@dataclass(frozen=True, slots=True)
class Row:
    """One option, the value given, and where it must arrive: ``argv`` (these words, in order,
    on the engine's command line), ``env`` (a variable of the engine's environment and its
    value), ``yaml`` (a line of sweep's vllm.yaml; None: not carried, and ``why``) and ``saved``
    (its value among sweep.json's options)."""

    option: str
    value: str
    argv: tuple[str, ...] = ()
    env: tuple[str, str] | None = None
    yaml: str | None = None
    saved: tuple[str, object] | None = None
    why: str = ""


ENGINE_GROUP = (
    Row("--model", "llama-3.1-8b", argv=("--model", "llama-3.1-8b"),
        yaml='model: "llama-3.1-8b"', saved=("model", "llama-3.1-8b")),
    Row("--max-num-seqs", "24", argv=("--max-num-seqs", "24"), yaml="max-num-seqs: 24",
        saved=("max_num_seqs", "24")),  # the text given: --max-num-seqs takes a list
    Row("--max-model-len", "16384", argv=("--max-model-len", "16384"),
        yaml="max-model-len: 16384"),
    Row("--tensor-parallel-size", "1", argv=("--tensor-parallel-size", "1"),
        yaml="tensor-parallel-size: 1", saved=("tensor_parallel_size", 1)),
    Row("--gpu-memory-utilization", "0.85", argv=("--gpu-memory-utilization", "0.85"),
        yaml="gpu-memory-utilization: 0.85", saved=("gpu_memory_utilization", 0.85)),
    Row("--dtype", "float16", argv=("--dtype", "float16"), yaml='dtype: "float16"',
        saved=("dtype", "float16")),
    # off: the one value that is not vLLM's default, so the config must carry it (every value on
    # every engine: tests/app/test_prefix_caching_table.py)
    Row("--prefix-caching", "off", argv=("--no-enable-prefix-caching",),
        yaml="no-enable-prefix-caching: true", saved=("prefix_caching", "off")),
    # carried into vllm.yaml, so the written config starts the engine that was measured
    Row("--engine-arg", "--block-size 32", argv=("--block-size", "32"), yaml="block-size: 32",
        saved=("engine_arg", ["--block-size 32"])),
    Row("--env", "TABLE_ENV=seen", env=("TABLE_ENV", "seen"), saved=("env", ["TABLE_ENV=seen"])),
    Row("--api-key", KEY, env=("VLLM_API_KEY", KEY),
        why="a secret: never written to a file (the engine refused every request without it)"),
    Row("--health-timeout", "3m", saved=("health_timeout", "3m")),
    # the user's own file: passed whole to every launch, and vllm.yaml is that file plus the rest
    Row("--engine-config", ENGINE_CONFIG, argv=("--config", ENGINE_CONFIG),
        yaml="swap-space: 4", saved=("engine_config", ENGINE_CONFIG)),
)  # fmt: skip


def given(rows: Sequence[Row | OutcomeRow]) -> list[str]:
    return [word for row in rows for word in (row.option, row.value)]


def recorded_starts(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def contains(words: list[str], part: tuple[str, ...]) -> bool:
    return any(words[i : i + len(part)] == list(part) for i in range(len(words)))


def check_engine_side(row: Row, start: dict) -> list[str]:
    """What is wrong with ``row`` on one recorded engine start (empty: it arrived)."""
    wrong = []
    if row.argv and not contains(start["argv"], row.argv):
        wrong.append(f"{row.option}: {' '.join(row.argv)} not on the command line {start['argv']}")
    if row.env and start["env"].get(row.env[0]) != row.env[1]:
        wrong.append(f"{row.option}: {row.env[0]}={start['env'].get(row.env[0])!r} in its env")
    return wrong


@pytest.fixture(scope="module")
def recording_vllm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    script = tmp_path_factory.mktemp("engine") / "recording_vllm.py"
    script.write_text(textwrap.dedent(RECORDING_VLLM))
    return script


def run(cmd: list[str], log: Path) -> subprocess.CompletedProcess[str]:
    """``cmd`` with the engine's starts recorded in ``log`` and its requests in ``log``'s
    sibling http.jsonl, and no API key but the table's."""
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    recording = {"TABLE_LOG": str(log), "TABLE_HTTP": str(http_log(log)), "TABLE_KEY": KEY}
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**env, **recording}
    )


def http_log(log: Path) -> Path:
    return log.with_name("http.jsonl")


@dataclass(frozen=True, slots=True)
class ClientRow:
    """A load-generator option (``value`` None: a flag alone), what every generation request
    the engine received must show (``request``, in words), and its value among sweep.json's
    options (``saved``; sweep only)."""

    option: str
    value: str | None
    request: str = ""
    saved: tuple[str, object] | None = None


ENDPOINT_PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def on_every_request(row: ClientRow, requests: list[dict]) -> bool:
    """Whether every recorded request shows ``row``'s value."""
    checks = {
        "--api-key": lambda r: r["keyed"],
        "--endpoint": lambda r: r["path"] == ENDPOINT_PATHS[str(row.value)],
        "--continuous-usage-stats": lambda r: (
            r["body"]["stream_options"].get("continuous_usage_stats") is True
        ),
        "--prompt-form": lambda r: (
            isinstance(r["body"].get("prompt"), list)
            and all(isinstance(t, int) for t in r["body"]["prompt"])
        ),
    }
    return all(checks[row.option](r) for r in requests)


CLIENT_SWEEP = (
    ClientRow("--api-key", KEY, request="Authorization: Bearer <the key>"),
    ClientRow("--continuous-usage-stats", None, request="stream_options.continuous_usage_stats",
              saved=("continuous_usage_stats", True)),
    ClientRow("--prompt-form", "ids", request="a prompt of token ids",
              saved=("prompt_form", "ids")),
    ClientRow("--request-timeout", "45s", saved=("request_timeout", "45s")),
)  # fmt: skip
CLIENT_REPLAY = (
    ClientRow("--api-key", KEY, request="Authorization: Bearer <the key>"),
    ClientRow("--endpoint", "chat", request="POST /v1/chat/completions"),
    ClientRow("--continuous-usage-stats", None, request="stream_options.continuous_usage_stats"),
)


def client_words(rows: tuple[ClientRow, ...]) -> list[str]:
    words = [row.option if row.value is None else f"{row.option}={row.value}" for row in rows]
    return [word for word in words if not word.startswith("--api-key")]  # given once, above


def client_problems(rows: tuple[ClientRow, ...], log: Path, saved: dict | None) -> list[str]:
    requests = streamed_requests(log)
    wrong = [] if len(requests) >= 12 else [f"{len(requests)} streamed requests of 12 or more"]
    for row in rows:
        if row.request and not on_every_request(row, requests):
            wrong.append(f"{row.option}: not every request showed {row.request}")
        if saved is not None:
            wrong += saved_problems(row.option, row.saved, saved)
    return wrong


def saved_problems(option: str, want: tuple[str, object] | None, saved: dict) -> list[str]:
    """What is wrong with ``option``'s value among sweep.json's options (empty: as given)."""
    if want is None or saved.get(want[0]) == want[1]:
        return []
    return [f"{option}: sweep.json has {want[0]}={saved.get(want[0])!r}"]


def assert_key_in_no_file(folder: Path) -> None:
    """The key is a secret: no file the run wrote holds it."""
    for path in folder.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), f"the API key is in {path}"


@dataclass(frozen=True, slots=True)
class OutcomeRow:
    """A traffic, SLO or calibration option, what shows it acted (``shows``, in words), and the
    check of that on the streamed requests the engine received and the sweep's
    recommendation.json (``doc``) and report.html (``page``)."""

    option: str
    value: str
    shows: str
    check: Callable[[list[dict], dict, str], bool]


def received_requests(log: Path) -> list[dict]:
    """Every generation request the engine received, as recorded."""
    return [json.loads(line) for line in http_log(log).read_text().splitlines()]


def streamed_requests(log: Path) -> list[dict]:
    """The replay's requests as the engine received them (the readiness check, one token and not
    streamed, is not one of them)."""
    return [r for r in received_requests(log) if r["body"].get("stream") is True]


TRAFFIC_GROUP = (
    OutcomeRow(
        "--prompt-dist",
        "fixed:200",
        "a prompt of 200 token ids on every request",
        lambda reqs, doc, page: all(len(r["body"]["prompt"]) == 200 for r in reqs),
    ),
    OutcomeRow(
        "--output-dist",
        "fixed:16",
        "max_tokens 16 and no early stop on every request",
        lambda reqs, doc, page: all(
            r["body"]["max_tokens"] == 16 and r["body"].get("ignore_eos") is True for r in reqs
        ),
    ),
    OutcomeRow(
        "--requests",
        "12",
        "12 streamed requests (one replay of one budget)",
        lambda reqs, doc, page: len(reqs) == 12 and doc["load"]["requests"] == 12,
    ),
    OutcomeRow(
        "--rate",
        "8",
        # scheduled, not realised: how late a busy machine sent them is not the option's doing
        "8 req/s asked and the arrivals drawn at it",
        lambda reqs, doc, page: (
            doc["load"]["asked_rate_per_s"] == 8.0
            and doc["points"][0]["selfcheck"]["target_rate_per_s"] == 8.0
        ),
    ),
    OutcomeRow(
        "--seed",
        "1",
        "seed 1 in the record (it draws the arrivals)",
        lambda reqs, doc, page: doc["settings"]["seed"] == 1,
    ),
)
SLO_GROUP = (
    OutcomeRow(
        "--slo-tbt",
        "200ms",
        "the verdict's TBT target, 200 ms",
        lambda reqs, doc, page: (
            doc["slo"]["tbt_ms"] == 200.0 and "<= 200 ms" in doc["choice"]["headline"]
        ),
    ),
    OutcomeRow(
        "--slo-ttft",
        "5s",
        "the verdict's TTFT target, 5.00 s",
        lambda reqs, doc, page: (
            doc["slo"]["ttft_ms"] == 5000.0 and "<= 5.00 s" in doc["choice"]["headline"]
        ),
    ),
    OutcomeRow(
        "--percentile",
        "95",
        "the verdict's percentile, p95",
        lambda reqs, doc, page: (
            doc["slo"]["percentile"] == 95.0 and doc["choice"]["headline"].count("p95 ") == 2
        ),
    ),
)
CALIBRATION_GROUP = (
    OutcomeRow(
        "--calibration",
        "seed",
        "the predictions' source, in the record and the report",
        lambda reqs, doc, page: (
            "calibration seed" in doc["model_source"]
            and "calibration seed" in page
            and "calibration measured" not in page
        ),
    ),
)


def outcome_problems(rows: tuple[OutcomeRow, ...], log: Path, run_dir: Path) -> list[str]:
    requests = streamed_requests(log)
    doc = json.loads((run_dir / "recommendation.json").read_text())
    page = (run_dir / "report.html").read_text()
    return [f"{row.option} {row.value}: not shown: {row.shows}"
            for row in rows if not row.check(requests, doc, page)]  # fmt: skip


OUTCOME_GROUPS = (*TRAFFIC_GROUP, *SLO_GROUP, *CALIBRATION_GROUP)
TRAFFIC = given(TRAFFIC_GROUP)


def test_sweep_carries_every_engine_option_to_the_engine_the_config_and_the_record(
    budgettune_cmd: list[str], recording_vllm: Path, tmp_path: Path
) -> None:
    log, run_dir = tmp_path / "starts.jsonl", tmp_path / "run"
    done = run([
        *budgettune_cmd, "sweep", "--engine", "vllm",
        "--engine-cmd", f"{sys.executable} {recording_vllm}", *given(ENGINE_GROUP),
        *client_words(CLIENT_SWEEP), "--profile", "analytic", "--gpu", "h100-sxm",
        "--budgets", "512", "--baseline", "none",
        *given(OUTCOME_GROUPS), "--max-replays", "1", "-o", str(run_dir),
    ], log)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    starts = recorded_starts(log)
    assert starts, "the engine was never started"
    wrong = [problem for start in starts for row in ENGINE_GROUP
             for problem in check_engine_side(row, start)]  # fmt: skip
    # As YAML reads it: the user's file (--engine-config) is written back in its own style.
    written = yaml.safe_load((run_dir / "vllm.yaml").read_text())
    saved = json.loads((run_dir / "sweep.json").read_text())["options"]
    for row in ENGINE_GROUP:
        if row.yaml is not None and not yaml.safe_load(row.yaml).items() <= written.items():
            wrong.append(f"{row.option}: {row.yaml!r} not in vllm.yaml {written}")
        wrong += saved_problems(row.option, row.saved, saved)
    wrong += client_problems(CLIENT_SWEEP, log, saved)
    wrong += outcome_problems(OUTCOME_GROUPS, log, run_dir)
    assert not wrong, "\n".join(wrong)
    # Each setting of the config is one of the table's (or the budget): nothing else was added.
    expected = {"max-num-batched-tokens": 512}
    for row in ENGINE_GROUP:
        expected.update(yaml.safe_load(row.yaml) if row.yaml else {})
    assert written == expected, written
    assert_key_in_no_file(run_dir)


def test_replay_carries_every_engine_option_to_the_engine(
    budgettune_cmd: list[str], recording_vllm: Path, tmp_path: Path
) -> None:
    log, out = tmp_path / "starts.jsonl", tmp_path / "replay"
    done = run([
        *budgettune_cmd, "replay", "--engine", "vllm",
        "--engine-cmd", f"{sys.executable} {recording_vllm}", *given(ENGINE_GROUP),
        *client_words(CLIENT_REPLAY), "--budget", "512", *TRAFFIC, "--json", "-o", str(out),
    ], log)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (start,) = recorded_starts(log)
    wrong = [problem for row in ENGINE_GROUP for problem in check_engine_side(row, start)]
    wrong += client_problems(CLIENT_REPLAY, log, None)
    assert not wrong, "\n".join(wrong)
    assert contains(start["argv"], ("--max-num-batched-tokens", "512"))
    # The traffic on the chat endpoint: as many requests as asked, each with its output length.
    requests = streamed_requests(log)
    assert len(requests) == 12 and all(r["body"]["max_tokens"] == 16 for r in requests)
    # The engine demanded the key, so every request carrying it is what let the replay complete.
    doc = json.loads(done.stdout)
    assert (doc["completed"], doc["failed"]) == (12, 0), doc
    assert_key_in_no_file(out)


# `profile` takes the engine group less what it sets itself (the budget and sequences its probes
# need, prefix caching off), and its own grid, which sizes the engine it starts.
PROFILE_ENGINE_GROUP = (
    Row("--model", "llama-3.1-8b", argv=("--model", "llama-3.1-8b")),
    Row("--dtype", "float16", argv=("--dtype", "float16")),
    Row("--tensor-parallel-size", "2", argv=("--tensor-parallel-size", "2"),
        why="1, vLLM's own default, is left off the command line"),
    Row("--engine-arg", "--block-size 32", argv=("--block-size", "32")),
    Row("--env", "TABLE_ENV=seen", env=("TABLE_ENV", "seen")),
    Row("--api-key", KEY, env=("VLLM_API_KEY", KEY)),
    # the largest probe (512 tokens beside 4 decoders) fits one iteration: 516 rounded up to 256s
    Row("--max-tokens", "512", argv=("--max-num-batched-tokens", "768")),
    Row("--max-batch", "4", argv=("--max-num-seqs", "5"), why="the decoders and one prompt"),
)  # fmt: skip


def test_profile_carries_every_engine_option_to_the_engine_and_the_profile(
    budgettune_cmd: list[str], recording_vllm: Path, tmp_path: Path
) -> None:
    log, out = tmp_path / "starts.jsonl", tmp_path / "profile" / "vllm.json"
    done = run([
        *budgettune_cmd, "profile", "--engine", "vllm",
        "--engine-cmd", f"{sys.executable} {recording_vllm}", *given(PROFILE_ENGINE_GROUP),
        "--repeats", "1", "--health-timeout", "3m", "-o", str(out),
    ], log)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (start,) = recorded_starts(log)
    wrong = [problem for row in PROFILE_ENGINE_GROUP for problem in check_engine_side(row, start)]
    assert not wrong, "\n".join(wrong)
    received = received_requests(log)
    # every probe (and the readiness check) carried the key the engine demanded
    assert len(received) > 10 and all(r["keyed"] for r in received)
    assert max(len(r["body"]["prompt"]) for r in received) == 512
    # The profile records the command it measured on: the command line the engine was given.
    saved = json.loads(out.read_text())["engine"]["settings"]
    assert saved["command"][-len(start["argv"]) :] == start["argv"], saved["command"]
    assert saved["dtype"] == "float16" and saved["max_num_seqs"] == 5
    assert_key_in_no_file(out.parent)
