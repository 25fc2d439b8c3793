"""`budgettune sweep` records its provenance when it runs: the Python version and the trace's
SHA-256 land in recommendation.json, and the report prints them as recorded (not "(now)")."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_python_version_and_trace_checksum_are_recorded(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"arrival_s": i * 0.25, "prompt_tokens": 300 + 50 * i, "output_tokens": 16})
        + "\n" for i in range(12)
    ))  # fmt: skip
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "sim", "--trace", str(trace), "--budgets", "1024",
         "--baseline", "none", "--slo-tbt", "100ms", "-o", str(run_dir)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    settings = json.loads((run_dir / "recommendation.json").read_text())["settings"]
    # the test runs under the interpreter the installed command runs under (one venv)
    assert settings["python_version"] == platform.python_version()
    assert settings["trace_sha256"] == hashlib.sha256(trace.read_bytes()).hexdigest()
    page = (run_dir / "report.html").read_text()
    assert settings["trace_sha256"] in page
    assert "(now)" not in page
