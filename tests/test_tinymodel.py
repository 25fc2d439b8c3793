"""The tiny random-weight Llama: shape, determinism, loading in transformers, CLI and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from budgettune.app.tiny_model import (
    BOS_ID,
    EOS_ID,
    TinyModelSpec,
    build_tiny_model,
    corpus_lines,
    train_tokenizer,
)
from budgettune.cli import app
from budgettune.core.errors import UserError

torch = pytest.importorskip("torch", reason="budgettune[torch] extra not installed")
transformers = pytest.importorskip("transformers", reason="budgettune[torch] extra not installed")

# Hand count for the default spec (hidden 256, 4 heads of 64, 2 KV heads, MLP 768, vocab 4096):
#   per layer: q 256*256 + k 128*256 + v 128*256 + o 256*256 + MLP 3*768*256 + 2 norms * 256
#            = 65536 + 32768 + 32768 + 65536 + 589824 + 512 = 786944
#   4 layers = 3147776; embeddings + untied lm_head = 2 * 4096 * 256 = 2097152; final norm 256
DEFAULT_PARAMS = 3147776 + 2097152 + 256


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "model"
    build_tiny_model(path)
    return path


def test_default_shape_and_size(tiny_dir: Path) -> None:
    config = json.loads((tiny_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) == (
        4,
        256,
        4096,
    )
    weights = (tiny_dir / "model.safetensors").stat().st_size
    # bfloat16: 2 bytes a parameter plus a small JSON header.
    assert 2 * DEFAULT_PARAMS < weights < 2 * DEFAULT_PARAMS + 20_000
    info = build_tiny_model(tiny_dir, overwrite=True)
    assert info.params == DEFAULT_PARAMS
    assert 10e6 < info.size_bytes < 12e6
    assert set(info.files) >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_loads_in_transformers_and_generates(tiny_dir: Path) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(tiny_dir)
    assert len(tok) == 4096
    assert (tok.bos_token_id, tok.eos_token_id) == (BOS_ID, EOS_ID)
    text = "Shtra plou breang, 2048 tokens!"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    # BPE merged something: fewer tokens than bytes.
    assert len(ids) < len(text.encode())
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32)
    assert sum(p.numel() for p in model.parameters()) == DEFAULT_PARAMS
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert tuple(logits.shape) == (1, len(ids), 4096)
    assert bool(torch.isfinite(logits).all())


def test_deterministic_from_seed(tmp_path: Path, tiny_dir: Path) -> None:
    again = tmp_path / "again"
    other = tmp_path / "other"
    build_tiny_model(again)
    build_tiny_model(other, TinyModelSpec(seed=1))
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (again / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    assert (other / "model.safetensors").read_bytes() != (
        tiny_dir / "model.safetensors"
    ).read_bytes()
    assert (other / "tokenizer.json").read_bytes() != (tiny_dir / "tokenizer.json").read_bytes()


def test_corpus_is_seeded_text() -> None:
    assert corpus_lines(3, words=50) == corpus_lines(3, words=50)
    assert corpus_lines(3, words=50) != corpus_lines(4, words=50)
    assert sum(len(line.split()) for line in corpus_lines(3, words=50)) == 50


def test_tokenizer_exact_vocab_size() -> None:
    assert train_tokenizer(600, seed=0).get_vocab_size() == 600


def test_refuses_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty"):
        build_tiny_model(tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (TinyModelSpec(heads=3), "hidden_size"),  # the heads follow from --hidden-size
        (TinyModelSpec(kv_heads=3), "hidden_size"),
        (TinyModelSpec(vocab_size=100), "vocab_size"),
        (TinyModelSpec(layers=0), "layers"),
        (TinyModelSpec(layers=64, hidden_size=8192), "hidden_size"),  # 52 G parameters
        (TinyModelSpec(max_position_embeddings=0), "max_model_len"),
    ],
)
def test_invalid_spec_names_field(tmp_path: Path, spec: TinyModelSpec, field: str) -> None:
    with pytest.raises(UserError) as caught:
        build_tiny_model(tmp_path / "m", spec)
    assert caught.value.field == field
    assert not (tmp_path / "m").exists()


def test_cli_json_and_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(app, ["tiny-model", str(out), "--json", "--layers", "2"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # Two layers of 786944 less than the default model.
    assert doc["params"] == DEFAULT_PARAMS - 2 * 786944
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    again = runner.invoke(app, ["tiny-model", str(out)])
    assert again.exit_code == 2
    assert "--force" in again.output
    forced = runner.invoke(app, ["tiny-model", str(out), "--force", "--seed", "7"])
    assert forced.exit_code == 0, forced.output
    assert "4 layers, hidden 256" in forced.stdout
