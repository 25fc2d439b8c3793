"""`--engine-config` on SGLang, asked of SGLang's own argument reading (no server is started:
the subject is the command line and the written files, and the SGLang starts elsewhere already
show this SGLang serving what it parsed). The launch command budgettune builds with the user's
file: the budget under test wins over the file's, the file's other settings arrive. The written
answer: sglang.yaml, the user's file with its comment kept and the budget set, read through
sglang.args (`--config sglang.yaml`) as the user would run it.

Marked ``sglang``: needs scripts/install-sglang-cpu.sh; fails (never skips) under CI=true.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sglang_env import ENGINE_FLAGS, resolve_launch_args

from budgettune.app.engine_config_file import with_engine_config
from budgettune.app.launch import launch_spec
from budgettune.app.requests import LaunchRequest, TrafficRequest
from budgettune.artifacts.engine_config import FixedSettings, write_engine_config
from budgettune.engines.sglang import sglang_command

pytestmark = pytest.mark.sglang

NAMES = ("chunked_prefill_size", "max_running_requests", "schedule_policy", "context_length",
         "model_path")  # fmt: skip


@dataclass(frozen=True)
class _Req:
    launch: LaunchRequest
    traffic: TrafficRequest = field(default_factory=TrafficRequest)


def test_sglang_reads_the_users_file_under_the_budget_and_the_answer_over_it(
    sglang_python: Path, sglang_model: Path, tmp_path: Path
) -> None:
    prod = tmp_path / "prod.yaml"
    user_text = (
        "# our SGLang settings\n"
        f"model-path: {sglang_model}\n"
        "schedule-policy: lpm  # prefix-aware\n"
        "context-length: 2048\n"
        "max-running-requests: 12\n"
    )
    prod.write_text(user_text)
    request = with_engine_config(_Req(LaunchRequest(engine="sglang", engine_config=prod)))
    spec = launch_spec(
        request.launch, engine="sglang", model=request.launch.model, gpu=None, url=None,
        max_model_len_tokens=int(request.traffic.max_model_len or 0) or None,
    )  # fmt: skip
    spec = dataclasses.replace(spec, budget_tokens=256)
    command = sglang_command(spec, 30000)
    argv = command[command.index("--model-path") :] + list(ENGINE_FLAGS)
    mark = f"cfg-{uuid.uuid4().hex[:8]}"
    launched = resolve_launch_args(sglang_python, argv, mark, NAMES)
    print(f"SGLang reads the launch as {launched}")
    assert launched == {
        "chunked_prefill_size": 256, "max_running_requests": 12, "schedule_policy": "lpm",
        "context_length": 2048, "model_path": str(sglang_model),
    }  # fmt: skip

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    args = write_engine_config(
        run_dir, engine="sglang", budget_tokens=1024, model=str(sglang_model),
        fixed=FixedSettings(max_num_seqs=12, max_model_len=2048, base_config_text=user_text),
    )  # fmt: skip
    written = (run_dir / "sglang.yaml").read_text()
    assert written == user_text + "chunked-prefill-size: 1024\n"  # comments and order kept
    answer = resolve_launch_args(
        sglang_python, [*args.read_text().split(), *ENGINE_FLAGS], mark, NAMES, cwd=run_dir
    )
    print(f"SGLang reads sglang.args as {answer}")
    assert answer == {**launched, "chunked_prefill_size": 1024}
