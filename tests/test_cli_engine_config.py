"""`budgettune replay --engine sim --engine-config FILE`: the built-in engine is started with the
user's file, takes the keys it models (the file's max-model-len, taken as given by budgettune
too) and names the ones it ignores in its log; the same key given as a flag is refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def test_the_built_in_engine_runs_with_the_users_file(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    prod = tmp_path / "prod.yaml"
    prod.write_text("# prod\nmax_model_len: 1024\nswap-space: 4\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [*budgettune_cmd, "replay", "--engine", "sim", "--engine-config", str(prod),
         "--budget", "512", "--requests", "6", "--rate", "4", "--prompt-dist", "fixed:256",
         "--output-dist", "fixed:8", "-o", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    point = json.loads((out / "results.json").read_text())["points"][0]
    command = point["engine"]["command"]
    assert command[command.index("--config") + 1] == str(prod.resolve())
    assert command[command.index("--max-model-len") + 1] == "1024"  # taken as given
    (log,) = out.glob("engine-*.log")
    assert "the built-in engine does not model swap-space; ignored" in log.read_text()
    refused = subprocess.run(
        [*budgettune_cmd, "replay", "--engine", "sim", "--engine-config", str(prod),
         "--max-model-len", "2048", "--requests", "2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "'max_model_len' is also given as --max-model-len 2048" in refused.stderr
    assert "Traceback" not in refused.stderr
