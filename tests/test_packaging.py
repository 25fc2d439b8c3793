"""What pyproject.toml, .ci/run and the install scripts promise each other."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def pins(requirements: list[str] | str) -> dict[str, str]:
    text = requirements if isinstance(requirements, str) else "\n".join(requirements)
    return dict(re.findall(r"\b([A-Za-z][\w.-]*)==([\w.+-]+)", text))


def test_ci_pins_ruff_and_mypy_as_the_test_extra() -> None:
    extra = pins(PROJECT["optional-dependencies"]["test"])
    ci = pins((ROOT / ".ci" / "run").read_text())
    assert {"ruff", "mypy"} <= set(extra)
    assert {name: ci.get(name) for name in ("ruff", "mypy")} == {
        name: extra[name] for name in ("ruff", "mypy")
    }


def test_imported_libraries_are_declared() -> None:
    declared = {re.split(r"[<>=!~ ;\[]", req)[0].lower() for req in PROJECT["dependencies"]}
    # the transport subclasses httpcore's backend; the self-check parses with prometheus_client
    assert {"httpx", "httpcore", "prometheus-client", "typer"} <= declared
    # engines run in their own environment, never as an extra of budgettune's; Ray (sweep --ray)
    # is one, and the dev setup installs it for its tests; aic is a library budgettune imports
    # itself (profiling/aiconfigurator.py), pinned to the version it reads
    assert set(PROJECT["optional-dependencies"]) == {"torch", "test", "ray", "aic"}
    assert '".[test,torch,ray,aic]"' in (ROOT / "scripts" / "setup-dev.sh").read_text()
    assert PROJECT["optional-dependencies"]["aic"] == ["aiconfigurator-core==0.12.0"]


def index_args(python: str, env: dict[str, str] | None = None) -> list[str]:
    script = f"source scripts/torch-index.sh && torch_cpu_index_args {python} 2.13.0"
    result = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, check=True,
        env={"PATH": os.environ.get("PATH", ""), **(env or {})},
    )  # fmt: skip
    return result.stdout.split()


def test_cpu_torch_index_only_where_pip_cannot_find_the_build() -> None:
    # A pip that cannot resolve torch==2.13.0+cpu (PyPI alone: no "+cpu" builds) gets PyTorch's
    # CPU wheel index; one that can (a local wheel folder, the build installed) gets nothing.
    assert index_args("/bin/false") == ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]
    assert index_args("/bin/true") == []
    mirror = {"TORCH_INDEX_URL": "https://mirror.example/whl/cpu"}
    assert index_args("/bin/true", mirror) == ["--extra-index-url", mirror["TORCH_INDEX_URL"]]


def test_install_scripts_use_the_index_helper() -> None:
    for script in ("setup-dev.sh", "install-vllm-cpu.sh", "install-sglang-cpu.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert "torch-index.sh" in text and '"${index_args[@]}"' in text
