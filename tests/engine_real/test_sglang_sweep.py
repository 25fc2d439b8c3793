"""`budgettune sweep --engine sglang` on the real SGLang CPU path in its default scheduling mode,
through the installed command: two budgets calibrated by the session's SGLang profile, the
second budget's server SIGKILLed in the middle of its replay (recorded as crashed, nothing of it
left), the first measured: there SGLang's default (prompt chunks run alone) holds the decoders
for the whole prefill, as the simulator's SGLang policy says; and a sglang.args that SGLang's
own launch_server parsing resolves to that budget. Two SGLang starts: one per budget.

Marked ``sglang``: needs scripts/install-sglang-cpu.sh; fails (never skips) under CI=true.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from episodes import Episodes, relative_error
from sglang_env import (
    ENGINE_FLAGS,
    ProfileRun,
    engine_cmd_text,
    engine_flag_args,
    env_args,
    resolve_launch_args,
)
from vllm_env import EngineWatch, on_client_core

from budgettune.core.records import RequestRecord
from budgettune.engines.process import group_members

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

BUDGETS = (64, 1024)
KILL_AFTER_COMPLETIONS = 4  # POSTs in the second server's log: the readiness one and 3 of the run
# Two decoders, then a 1000-token prompt while they decode; three times, the first to warm up.
# SGLang's default at budget 64 prefills it in 16 iterations with the decoders waiting.
EPISODES = Episodes(
    decoders=2, decoder_prompt=64, decoder_output=100, long_prompt=1000, long_output=4,
    long_after_s=0.3, count=3, spacing_s=3.5,
)  # fmt: skip


def engine_logs(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("engine-*.log"), key=lambda p: p.stat().st_mtime)


def budget_records(run_dir: Path, budget: int) -> list[RequestRecord]:
    """A measured budget's per-request records, in schedule order."""
    saved = json.loads((run_dir / f"budget-{budget}" / "results.json").read_text())
    records = [RequestRecord.from_json(r) for r in saved["points"][0]["records"]]
    return sorted(records, key=lambda r: r.request_id)


def test_sweep_survives_a_sigkill_and_writes_args_sglang_starts_from(
    sglang_python: Path,
    sglang_model: Path,
    sglang_profile: ProfileRun,
    budgettune_cmd: list[str],
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in EPISODES.trace_rows()))
    run_dir = tmp_path / "run"
    mark = f"sweep-{uuid.uuid4().hex[:8]}"
    command = on_client_core([
        *budgettune_cmd, "sweep", "--engine", "sglang",
        "--engine-cmd", engine_cmd_text(sglang_python), *engine_flag_args(),
        "--model", str(sglang_model), "--dtype", "float32", *env_args(mark),
        "--max-num-seqs", "16", "--profile", str(sglang_profile.path),
        "--budgets", ",".join(map(str, BUDGETS)), "--exhaustive", "--baseline", "none",
        "--trace", str(trace),
        # SLOs a CPU meets at both budgets: this test is about the lifecycle and the config
        "--slo-tbt", "10s", "--slo-ttft", "30s", "--health-timeout", "5m", "-o", str(run_dir),
    ])  # fmt: skip
    started = time.monotonic()
    killed: list[tuple[int, str]] = []
    with EngineWatch(mark) as watch:
        cli = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not killed:
                assert cli.poll() is None, cli.communicate()
                logs = engine_logs(run_dir)
                text = logs[1].read_text(errors="replace") if len(logs) > 1 else ""
                live = [g for g in tuple(watch.groups) if group_members(g)]  # a snapshot
                if text.count("POST /v1/completions") >= KILL_AFTER_COMPLETIONS and live:
                    # The first server is gone before the second starts: one group lives, and
                    # its id is the pid of the server budgettune started.
                    (leader,) = live
                    os.kill(leader, signal.SIGKILL)
                    killed.append((leader, logs[1].name))
                time.sleep(0.1)
            assert killed, "the second SGLang server never served the replay"
            stdout, stderr = cli.communicate(timeout=600)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        sweep_s = time.monotonic() - started
        assert cli.returncode == 0, stdout[-2000:] + stderr[-3000:]
        assert watch.leftovers() == [], "an SGLang process outlived the sweep"
        assert len(watch.groups) == len(BUDGETS)  # one server per budget, no more
    pid, log_name = killed[0]
    killed_budget = int(log_name.removeprefix("engine-").removesuffix(".log"))
    doc = json.loads((run_dir / "recommendation.json").read_text())
    points = {p["budget"]: p for p in doc["points"]}
    print(f"\nsweep on SGLang CPU: {sweep_s:.0f} s; SIGKILL of pid {pid} (budget {killed_budget})")
    for budget, point in sorted(points.items()):
        print(f"  budget {budget}: {point['status']}: {point.get('error')}")
    # The kill is recorded with the engine's exit, and the sweep went on to the other budget.
    crashed = points[killed_budget]
    assert crashed["status"] == "crashed", crashed
    assert "status -9" in crashed["error"]
    (survivor,) = (b for b in BUDGETS if b != killed_budget)
    assert points[survivor]["status"] == "measured"
    assert points[survivor]["measured"]["failed"] == 0
    assert points[survivor]["engine"]["name"] == "sglang"
    assert points[survivor]["engine"]["version"] == "0.5.23"
    assert doc["budget"] == survivor
    # SGLang's default runs the long prompt's chunks alone while any remain ("run prefill first
    # if possible", Scheduler.get_next_batch_to_run): the decoders wait through all of them, so
    # their longest gap is about the prompt's TTFT, which chunking does not shorten. The
    # simulator's SGLang policy (decodes apart from chunks) must explain that better than
    # vLLM's (decodes beside them).
    measured = EPISODES.figures(budget_records(run_dir, survivor))
    assumed = EPISODES.simulated(sglang_profile.path, survivor, beside=False)
    other = EPISODES.simulated(sglang_profile.path, survivor, beside=True)
    print(
        f"SGLang default, budget {survivor}: {measured.line()}; simulated TTFT "
        f"{assumed.ttft_median_s * 1e3:.0f} ms (error "
        f"{relative_error(assumed.ttft_median_s, measured.ttft_median_s):.0%}), longest gap "
        f"{assumed.gap_median_s * 1e3:.0f} ms (error "
        f"{relative_error(assumed.gap_median_s, measured.gap_median_s):.0%}); gap / TTFT "
        f"measured {measured.gap_share:.2f}, simulated {assumed.gap_share:.2f}, vLLM's policy "
        f"{other.gap_share:.2f}"
    )
    # The TTFT also holds the request's way in (HTTP, tokenising, the iteration under way).
    assert measured.gap_share > 0.6, measured
    off = abs(assumed.gap_share - measured.gap_share)
    assert off < abs(other.gap_share - measured.gap_share), (assumed, other, measured)
    assert doc["model_source"].startswith("calibrated profile")
    # SGLang's file, no vLLM file: the budget, and only what the test set (the recipe's
    # --engine-arg flags too: the file starts the engine that was measured).
    args = shlex.split((run_dir / "sglang.args").read_text())
    assert args == [
        "--model-path", str(sglang_model), "--chunked-prefill-size", str(survivor),
        "--max-running-requests", "16", "--dtype", "float32", *ENGINE_FLAGS,
    ], args  # fmt: skip
    assert not (run_dir / "vllm.yaml").exists()

    # The written arguments are what the user runs: SGLang's own launch_server parsing and
    # resolution must take the budget and the rest from them (the sweep's starts already showed
    # this SGLang serving with those settings; another start would only repeat that).
    resolved = resolve_launch_args(sglang_python, args, mark)
    print(f"SGLang reads sglang.args as {resolved}")
    assert resolved == {
        "chunked_prefill_size": survivor, "max_running_requests": 16, "dtype": "float32",
        "model_path": str(sglang_model),
    }  # fmt: skip
