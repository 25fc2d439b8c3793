"""A secret given to the engine with `--env` (HF_TOKEN, *_API_KEY) reaches the engine and no
file: every file of the run folder shows `***`, and `--resume` takes the value from
budgettune's own environment, or asks for it, as it does the API key."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from budgettune.app.client import without_secrets
from budgettune.app.launch import parse_env
from budgettune.core.auth import hide_env, secret_name
from budgettune.core.errors import SpecError

SECRET = "hf_a1b2c3d4e5f6secret"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("HUGGING_FACE_HUB_TOKEN", True),
        ("VLLM_API_KEY", True),
        ("aws_secret_access_key", True),
        ("DB_PASSWORD", True),
        ("MY_PASSPHRASE", True),
        ("GOOGLE_APPLICATION_CREDENTIALS", True),
        ("VLLM_CPU_KVCACHE_SPACE", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("OMP_NUM_THREADS", False),
    ],
)
def test_which_names_are_secrets(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_files_show_a_secrets_value_as_stars() -> None:
    assert hide_env(["HF_TOKEN=abc", "OMP_NUM_THREADS=1", "VLLM_API_KEY="]) == [
        "HF_TOKEN=***",
        "OMP_NUM_THREADS=1",
        "VLLM_API_KEY=***",
    ]
    command = ["budgettune", "sweep", "--env", f"HF_TOKEN={SECRET}", f"--env=X_TOKEN={SECRET}",
               "--env", "OMP_NUM_THREADS=1", "--api-key", SECRET, "--env", "A=--env"]  # fmt: skip
    shown = without_secrets(command)
    assert SECRET not in " ".join(shown)
    assert shown[2:4] == ("--env", "HF_TOKEN=***") and shown[4] == "--env=X_TOKEN=***"
    assert shown[5:7] == ("--env", "OMP_NUM_THREADS=1") and shown[8] == "***"
    assert shown[-2:] == ("--env", "A=--env")


def test_a_urls_password_is_hidden_whatever_the_variable_is_called() -> None:
    assert hide_env(["DATABASE_URL=postgres://u:PW123456@db.local:5432/x"]) == [
        "DATABASE_URL=postgres://u:***@db.local:5432/x"
    ]
    # resume takes such a value from budgettune's environment, or asks for it again
    with pytest.raises(SpecError, match="DATABASE_URL is a secret"):
        parse_env(["DATABASE_URL=postgres://u:***@db.local:5432/x"])


def test_a_secret_is_hidden_wherever_else_the_command_line_holds_it() -> None:
    shown = without_secrets([
        "budgettune", "sweep", "--env", f"HF_TOKEN={SECRET}", "--engine-arg",
        f"--hf-token {SECRET}", "--api-key", "sk-key-0451", "--engine-cmd",
        "vllm serve --served-model-name sk-key-0451", "--url", "http://me:pw0451xyz@host:8000",
    ])  # fmt: skip
    text = " ".join(shown)
    for value in (SECRET, "sk-key-0451", "pw0451xyz"):
        assert value not in text
    assert "--hf-token ***" in text and "http://me:***@host:8000" in text


def test_a_hidden_secret_comes_from_budgettunes_environment_or_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    assert parse_env(["HF_TOKEN=***", "A=1"]) == {"HF_TOKEN": SECRET, "A": "1"}
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(SpecError) as error:
        parse_env(["HF_TOKEN=***"])
    assert error.value.field == "env" and "set HF_TOKEN in budgettune's environment" in str(
        error.value.message
    )
    assert parse_env(["OMP_NUM_THREADS=***"]) == {"OMP_NUM_THREADS": "***"}  # only secrets hide


def test_no_file_of_a_sweep_holds_the_secret_and_resume_asks_for_it(
    tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    out = tmp_path / "run"
    args = ["sweep", "--engine", "sim", "--slo-tbt", "50ms", "--requests", "10",
            "--budgets", "512", "-o", str(out)]  # fmt: skip
    # the secret typed a second time, where no name says it is one (the engine's served model
    # name lands in points.jsonl and every results file): hidden there too, by its value
    env_args = ["--env", f"HF_TOKEN={SECRET}", "--env", "OMP_NUM_THREADS=1",
                "--env", "DATABASE_URL=postgres://me:pw0451xyz@db/x",
                "--engine-arg", f"--served-model-name {SECRET}"]  # fmt: skip
    done = subprocess.run([*budgettune_cmd, *args, *env_args], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 5
    assert not [p for p in files if SECRET.encode() in p.read_bytes()]
    assert not [p for p in files if b"pw0451xyz" in p.read_bytes()]
    assert "HF_TOKEN=***" in (out / "sweep.json").read_text()
    assert "OMP_NUM_THREADS=1" in (out / "sweep.json").read_text()
    # --resume: without the secret in budgettune's environment it is asked for, naming it
    clean = {k: v for k, v in os.environ.items() if k != "HF_TOKEN"}
    resumed = subprocess.run([*budgettune_cmd, "sweep", "--resume", str(out)],
                             capture_output=True, text=True, timeout=300, env=clean)  # fmt: skip
    assert resumed.returncode == 2
    said = " ".join(resumed.stderr.split())
    assert "HF_TOKEN is a secret the saved sweep does not keep" in said
    assert "Traceback" not in said
    again = subprocess.run([*budgettune_cmd, "sweep", "--resume", str(out)], capture_output=True,
                           text=True, timeout=300, env={**clean, "HF_TOKEN": SECRET,
                           "DATABASE_URL": "postgres://me:pw0451xyz@db/x"})  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert not [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
