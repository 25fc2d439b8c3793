"""What the `vllm`-marked modules share for the whole session: the vLLM venv's python, one tiny
model (built once, not once per module) and one compile cache, so that a configuration vLLM
compiled for one test (the sweep's budget 1024 with 16 sequences, say, which the trade-off test
compiled first) loads from the cache in another (vllm_env.cpu_env)."""

from __future__ import annotations

from pathlib import Path

import pytest
from vllm_env import build_model, vllm_python_or_skip  # this folder is on sys.path


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    return vllm_python_or_skip()


@pytest.fixture(scope="session")
def model_dir(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random-weight Llama every vLLM test serves (read only: no test writes to it)."""
    return build_model(vllm_python, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """VLLM_CACHE_ROOT of every server the session starts."""
    return tmp_path_factory.mktemp("vllm-cache")
