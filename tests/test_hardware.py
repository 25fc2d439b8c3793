"""GPU presets and model shapes: parameter counts against published figures, config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from budgettune.core.errors import SpecError
from budgettune.core.hardware import (
    GPU_PRESETS,
    MODEL_PRESETS,
    custom_gpu,
    dtype_bytes,
    resolve_gpu,
    resolve_model,
)


@pytest.mark.parametrize(
    ("name", "published_billions", "tolerance"),
    [
        ("llama-3.1-8b", 8.03, 0.01),
        ("llama-3.1-70b", 70.6, 0.1),
        ("mistral-7b", 7.24, 0.01),
        ("qwen2.5-7b", 7.62, 0.01),
        ("yi-34b", 34.39, 0.05),
        ("llama-2-13b", 13.02, 0.02),
        ("qwen3-32b", 32.8, 0.05),  # its model card: 32.8B (qk-norm weights not counted)
    ],
)
def test_parameter_counts_match_published(
    name: str, published_billions: float, tolerance: float
) -> None:
    assert MODEL_PRESETS[name].params / 1e9 == pytest.approx(published_billions, abs=tolerance)


def test_kv_bytes_per_token_llama_8b() -> None:
    # BRIEF: 2 x 32 x 8 x 128 x 2 = 131,072 bytes
    assert MODEL_PRESETS["llama-3.1-8b"].kv_bytes_per_token(2) == 131_072


def test_required_gpu_presets() -> None:
    for name in ("h100-sxm", "h100-pcie", "h200", "a100-80g", "a100-40g", "l40s", "a6000", "b200"):
        assert name in GPU_PRESETS
    h100 = resolve_gpu("H100-SXM")
    assert (h100.peak_flops, h100.bandwidth_bytes_per_s, h100.memory_bytes) == (
        989e12,
        3.35e12,
        80e9,
    )
    assert resolve_gpu("h200").bandwidth_bytes_per_s == 4.8e12


def test_unknown_presets_list_the_known_ones() -> None:
    with pytest.raises(SpecError, match="h100-sxm") as caught:
        resolve_gpu("h300")
    assert caught.value.field == "gpu"
    with pytest.raises(SpecError, match=r"llama-3\.1-8b") as caught:
        resolve_model("no-such-model")
    assert caught.value.field == "model"
    with pytest.raises(SpecError, match="bfloat16") as caught:
        dtype_bytes("float12")
    assert caught.value.field == "dtype"


def test_custom_gpu_rejects_non_positive() -> None:
    assert custom_gpu(100, 1.0, 24).peak_flops == 100e12
    with pytest.raises(SpecError, match=r"must be at least 0\.001 TB/s, got 0") as caught:
        custom_gpu(100, 0, 24)
    assert caught.value.field == "bandwidth_tbs"
    for figures, field in (((100, float("inf"), 24), "bandwidth_tbs"),
                           ((float("nan"), 1.0, 24), "peak_tflops"),
                           ((1e300, 1.0, 24), "peak_tflops"),
                           ((100, 1e-308, 24), "bandwidth_tbs"),
                           ((100, 1.0, 1e-300), "memory_gb")):  # fmt: skip
        with pytest.raises(SpecError) as caught:
            custom_gpu(*figures)
        assert caught.value.field == field


def test_config_json_file_and_folder(tmp_path: Path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    for where in (tmp_path, tmp_path / "config.json"):
        shape = resolve_model(str(where))
        assert shape.params == MODEL_PRESETS["llama-3.1-8b"].params
        assert shape.head_dim == 128 and shape.kv_heads == 8


def test_config_json_missing_field_is_named(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    with pytest.raises(SpecError, match="num_hidden_layers") as caught:
        resolve_model(str(tmp_path))
    assert caught.value.field == "model"


def test_tied_embeddings_count_once() -> None:
    base = MODEL_PRESETS["llama-3.1-8b"]
    from dataclasses import replace

    tied = replace(base, tied_embeddings=True)
    assert base.params - tied.params == base.vocab * base.hidden
