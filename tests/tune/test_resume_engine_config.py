"""sweep.json keeps the text of the user's --engine-config (a credential's value hidden), and
--resume launches only with the same file: one that changed since is refused in one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

PROD = "# prod\nmax_num_seqs: 8\nhf-token: hf_secret_0451\n"


def _sweep(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, "sweep", *args], capture_output=True, text=True, timeout=120)


def test_resume_needs_the_same_engine_config(budgettune_cmd: list[str], tmp_path: Path) -> None:
    prod = tmp_path / "prod.yaml"
    prod.write_text(PROD)
    run_dir = tmp_path / "run"
    first = _sweep(
        budgettune_cmd, "--engine", "sim", "--engine-config", str(prod), "--budgets", "512",
        "--baseline", "none", "--requests", "6", "--rate", "4", "--prompt-dist", "fixed:128",
        "--output-dist", "fixed:8", "--slo-tbt", "1s", "--slo-ttft", "5s", "-o", str(run_dir),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    settings = json.loads((run_dir / "sweep.json").read_text())
    assert settings["engine_config_text"] == "# prod\nmax_num_seqs: 8\nhf-token: '***'\n"
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert "hf_secret_0451" not in path.read_text(errors="replace"), path
    # the written config is the user's file plus the answer, the credential hidden there too
    assert (run_dir / "vllm.yaml").read_text() == (
        "# prod\nmax_num_seqs: 8\nhf-token: '***'\nmax-num-batched-tokens: 512\n"
    )
    # the report shows what the written config changes in the user's file, and the file
    page = (run_dir / "report.html").read_text()
    diff = page[page.index('id="engine-config-diff"') :]
    diff = diff[: diff.index("</pre>")]
    assert '<span class="diff-add">+max-num-batched-tokens: 512</span>' in diff
    assert "diff-del" not in diff  # nothing of the user's changed
    assert "max_num_seqs: 8" in page[page.index('id="engine-config-text"') :]
    prod.write_text(PROD.replace("max_num_seqs: 8", "max_num_seqs: 16"))
    changed = _sweep(budgettune_cmd, "--resume", str(run_dir))
    assert changed.returncode == 2
    assert f"--engine-config: {prod.resolve()} changed since this sweep started" in " ".join(
        changed.stderr.split()
    )
    assert "Traceback" not in changed.stderr
    prod.write_text(PROD)
    again = _sweep(budgettune_cmd, "--resume", str(run_dir))
    assert again.returncode == 0, again.stderr[-2000:]
