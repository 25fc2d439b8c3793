"""Fixtures for the profile tests: synthetic probes from a known step-time model, a tiny Llama
config.json (the shape of budgettune.app.tiny_model's model, no weights: torch builds random
ones)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from profile_truths import llama_on_h100

from budgettune.model.profile import Probe
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.plan import PREFILL_GRID

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

SyntheticProbes = Callable[..., list[Probe]]


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    """A model folder holding only the tiny Llama's config.json (max length 4096)."""
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    return folder


@pytest.fixture
def h100_llama(request: pytest.FixtureRequest) -> StepModel:
    """Llama-3.1-8B on an H100 SXM from the measured calibration (the engine accounting, the
    soft knee), t0 = 2 ms, overlapped unless parametrized with a mode."""
    return llama_on_h100("measured", getattr(request, "param", "overlapped"))


@pytest.fixture
def h100_llama_seed(request: pytest.FixtureRequest) -> StepModel:
    """The same in the seed calibration (every weight per token, a hard max)."""
    return llama_on_h100("seed", getattr(request, "param", "overlapped"))


def _probes(
    model: StepModel,
    *,
    seed: int = 0,
    noise: float = 0.02,
    repeats: int = 5,
    prefill: Sequence[int] = tuple(p for p in PREFILL_GRID if p <= 8192),
    batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
    contexts: Sequence[int] = (256, 1024, 4096),
    mixed: Sequence[tuple[int, int, int]] = (
        (256, 16, 2048),
        (1024, 64, 2048),
        (4096, 64, 4096),
        (4096, 256, 4096),
        (2048, 256, 2048),
    ),
) -> list[Probe]:
    """Each shape timed by ``model`` with multiplicative lognormal noise of sigma ``noise``."""
    rng = np.random.default_rng(seed)

    def timed(p: int, b: int, ctx: int) -> tuple[float, ...]:
        base = model.iteration_time_s([(p, 0)] if p else [], [ctx] * b)
        return tuple(float(t) for t in base * np.exp(rng.normal(0.0, noise, repeats)))

    out = [Probe("prefill", p, 0, 0, timed(p, 0, 0)) for p in prefill]
    out += [Probe("decode", 0, b, c, timed(0, b, c)) for c in contexts for b in batches]
    out += [Probe("mixed", p, b, c, timed(p, b, c)) for p, b, c in mixed]
    return out


@pytest.fixture
def synthetic_probes() -> SyntheticProbes:
    """``synthetic_probes(model, seed=, noise=, ...)``: probes timed by a known model + noise."""
    return _probes
