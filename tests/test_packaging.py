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


def readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    commands = [block for block in blocks if "setup-dev.sh" in block]
    assert len(commands) == 1, commands
    return commands[0].strip()


def test_ci_runs_the_checks_first_then_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    steps = [
        "ruff check", "ruff format --check", ".venv/bin/mypy", ".venv/bin/lint-imports",
        readme_test_command(),
    ]  # fmt: skip
    at = [ci.find(step) for step in steps]
    assert -1 not in at, dict(zip(steps, at, strict=True))
    assert at == sorted(at), dict(zip(steps, at, strict=True))
    # ruff and mypy come from the test extra's pins, not from a second list in CI
    extra = pins(PROJECT["optional-dependencies"]["test"])
    assert {"ruff", "mypy"} <= set(extra)
    assert not pins(ci)


def test_the_fast_tier_is_one_marker_expression_written_once() -> None:
    script = (ROOT / "scripts" / "test-fast.sh").read_text()
    expressions = re.findall(r'^FAST_TIER="([^"]+)"$', script, flags=re.M)
    assert len(expressions) == 1, expressions
    written = [
        path.relative_to(ROOT)
        for folder in ("scripts", "tests", ".ci", "benchmarks")
        for path in (ROOT / folder).rglob("*")
        if path.is_file() and path.suffix in ("", ".sh", ".py", ".toml", ".md")
        and expressions[0] in path.read_text(errors="replace")
    ]  # fmt: skip
    assert written == [Path("scripts/test-fast.sh")]
    # every marker the expression names is registered (--strict-markers refuses others)
    registered = {
        line.split(":")[0].strip()
        for line in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
            "ini_options"
        ]["markers"]
    }
    named = set(re.findall(r"[a-z_]+", expressions[0])) - {"not", "and", "or"}
    assert named <= registered and "timing" in registered, (named, registered)


def test_imported_libraries_are_declared() -> None:
    declared = {re.split(r"[<>=!~ ;\[]", req)[0].lower() for req in PROJECT["dependencies"]}
    # the transport subclasses httpcore's backend; the self-check parses with prometheus_client
    assert {"httpx", "httpcore", "prometheus-client", "typer"} <= declared
    # engines run in their own environment, never as an extra of budgettune's; Ray (sweep --ray)
    # is one, and the dev setup installs it for its tests; aic is a library budgettune imports
    # itself (profiling/aiconfigurator.py), pinned to the version it reads; docs builds the site
    assert set(PROJECT["optional-dependencies"]) == {"torch", "test", "ray", "aic", "docs"}
    # the dependencies setup-dev.sh caches are pyproject's, read from it, with all five extras
    installed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-deps.sh"), "--requirements"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    wanted = list(PROJECT["dependencies"])
    for extra in ("test", "torch", "ray", "aic", "docs"):
        wanted += PROJECT["optional-dependencies"][extra]
    assert set(wanted) <= set(installed), set(wanted) - set(installed)
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
    for script in ("install-deps.sh", "install-vllm-cpu.sh", "install-sglang-cpu.sh"):
        text = (ROOT / "scripts" / script).read_text()
        assert "torch-index.sh" in text and '"${index_args[@]}"' in text
