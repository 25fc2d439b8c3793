"""Values given to `sweep` arrive where they act: the API key in the requests an external server
checks, --max-num-seqs in the config file written, the calibration in the report's profile chart.
Each ran through the installed command against a real server on loopback."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # three sweeps, about 6 s each

SimStart = Callable[[list[str]], AbstractContextManager[tuple[str, object]]]

KEY = "sk-plumbing-5e1f"
SMALL_SWEEP = [
    "--requests", "12", "--rate", "8", "--prompt-dist", "fixed:200", "--output-dist", "fixed:16",
    "--slo-tbt", "500ms", "--slo-ttft", "10s", "--seed", "0",
]  # fmt: skip


@pytest.mark.parametrize("key_from", ["--api-key", "VLLM_API_KEY"])
def test_sweep_of_an_external_server_sends_its_key(
    key_from: str, sim_factory: SimStart, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    with sim_factory(["--api-key", KEY, "--max-num-batched-tokens", "512"]) as (url, _):
        env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "OPENAI_API_KEY")}
        args = [*budgettune_cmd, "sweep", "--engine", "external", "--url", url, *SMALL_SWEEP]
        if key_from == "--api-key":
            args += ["--api-key", KEY]
        else:
            env["VLLM_API_KEY"] = KEY
        done = subprocess.run(
            [*args, "-o", str(tmp_path / "run")],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "recommendation.json").read_text())
    point = doc["points"][-1]
    assert point["budget"] == 512 and point["measured"]["failed"] == 0, point
    assert point["measured"]["completed"] == 12 * point["replays"]
    for written in (tmp_path / "run").rglob("*"):  # the key is never saved
        if written.is_file():
            assert KEY not in written.read_text(errors="replace"), written


def test_sweep_on_the_builtin_engine_keeps_max_num_seqs_and_names_its_calibration(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    run = tmp_path / "run"
    done = subprocess.run(
        [*budgettune_cmd, "sweep", "--engine", "sim", "--budgets", "512", "--baseline", "none",
         "--max-num-seqs", "96", *SMALL_SWEEP, "-o", str(run)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    config = [ln for ln in (run / "vllm.yaml").read_text().splitlines() if not ln.startswith("#")]
    assert sorted(config) == ["max-num-batched-tokens: 512", "max-num-seqs: 96"], config
    # The default calibration is the measured one; the report's profile chart names it, as the
    # verdict does, and not the seed's.
    options = json.loads((run / "sweep.json").read_text())["options"]
    assert options["calibration"] == "measured"
    page = (run / "report.html").read_text()
    assert "(calibration measured)" in page
    assert "(calibration seed)" not in page


def test_resume_against_a_server_of_another_model_saves_nothing_of_it(
    sim_factory: SimStart, budgettune_cmd: list[str], tmp_path: Path
) -> None:
    """An external server restarted with another model: the resumed sweep's point is refused,
    not merged with the first model's (it was, without a word)."""
    run = tmp_path / "run"
    with sim_factory(["--model", "llama-3.1-8b", "--max-num-batched-tokens", "512"]) as (url, _):
        first = subprocess.run(
            [*budgettune_cmd, "sweep", "--engine", "external", "--url", url, *SMALL_SWEEP,
             "-o", str(run)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    # the same URL: --resume keeps it
    port = url.rsplit(":", 1)[1]
    again = ["--model", "qwen2.5-7b", "--max-num-batched-tokens", "1024", "--port", port]
    with sim_factory(again):
        resumed = subprocess.run(
            [*budgettune_cmd, "sweep", "--resume", str(run)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert resumed.returncode == 2, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    said = " ".join(resumed.stderr.split())
    assert "budget 1024 was served by model 'qwen2.5-7b', but budget 512" in said, said
    assert "measured on 'llama-3.1-8b'; its point was not saved" in said, said
    assert "Traceback" not in resumed.stderr
    lines = (run / "points.jsonl").read_text().splitlines()
    assert [json.loads(line)["budget"] for line in lines] == [512]
