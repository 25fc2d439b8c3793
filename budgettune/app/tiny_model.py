"""A tiny random-weight Llama and a locally trained byte-level BPE tokenizer, saved as a model
folder that ``vllm serve`` and ``transformers`` load: a model for tests and CPU demos, since no
model can be downloaded. Needs the optional ``budgettune[torch]`` extra (torch, transformers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from budgettune.core.errors import UserError
from budgettune.core.files import storage_error, write_atomic
from budgettune.core.limits import MAX_TOKENS

if TYPE_CHECKING:  # torch is an extra, imported where the model is built
    from torch import Tensor

# Special tokens come first so their ids are fixed (0, 1, 2) whatever the merges turn out to be.
SPECIAL_TOKENS: tuple[str, ...] = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

# The generated corpus: pseudo-words from these syllables. Enough distinct pairs that BPE always
# reaches the requested vocabulary, and cheap to train on (about a second on one core).
_ONSETS: tuple[str, ...] = (
    *("", "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"),
    *("br", "ch", "cl", "dr", "gr", "pl", "sh", "st", "th", "tr"),
)
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "t", "l", "m", "ng", "st", "ck")
_PUNCT = (".", ",", "!", "?", ";", ":")
_CORPUS_WORDS = 120_000
MAX_LAYERS = 64
MAX_HIDDEN = 8192
MAX_VOCAB = 1 << 18
MAX_PARAMS = 200_000_000  # 0.8 GB of float32 weights in memory while written


@dataclass(slots=True, frozen=True)
class TinyModelSpec:
    """Shape of the tiny Llama. The defaults give about 5.2 M parameters, ~11 MB in bfloat16."""

    layers: int = 4
    hidden_size: int = 256
    intermediate_size: int = 768
    heads: int = 4
    kv_heads: int = 2
    vocab_size: int = 4096
    max_position_embeddings: int = 8192
    seed: int = 0

    @classmethod
    def sized(
        cls, *, layers: int, hidden_size: int, vocab_size: int, max_model_len: int, seed: int
    ) -> TinyModelSpec:
        """The spec for a layer count and hidden size: the default 4 heads / 2 KV heads unless
        the hidden size cannot hold them, an MLP three times as wide."""
        fits = hidden_size % 4 == 0
        return cls(
            layers=layers,
            hidden_size=hidden_size,
            heads=4 if fits else 1,
            kv_heads=2 if fits else 1,
            intermediate_size=3 * hidden_size,
            vocab_size=vocab_size,
            max_position_embeddings=max_model_len,
            seed=seed,
        )

    def validate(self) -> None:
        """Raise UserError naming the first field that cannot make a Llama, or a tiny one: at
        most MAX_LAYERS layers, MAX_HIDDEN hidden, MAX_VOCAB tokens, MAX_PARAMS parameters. A
        field is named as the option that sets it (``hidden_size`` for the heads, too)."""
        checks = {  # field -> (ok, what it must be)
            "layers": (1 <= self.layers <= MAX_LAYERS, f"1-{MAX_LAYERS}"),
            "hidden_size": (8 <= self.hidden_size <= MAX_HIDDEN, f"8-{MAX_HIDDEN:,}"),
            # Below 256 + specials the byte alphabet alone would not fit.
            "vocab_size": (
                256 + len(SPECIAL_TOKENS) + 1 <= self.vocab_size <= MAX_VOCAB,
                f"{256 + len(SPECIAL_TOKENS) + 1}-{MAX_VOCAB:,}",
            ),
            "max_model_len": (
                16 <= self.max_position_embeddings <= MAX_TOKENS,
                f"16-{MAX_TOKENS:,}",
            ),
            "seed": (self.seed >= 0, "0 or more"),
        }
        values = {"max_model_len": self.max_position_embeddings}
        for name, (ok, expected) in checks.items():
            if not ok:
                value = values.get(name, getattr(self, name, None))
                raise UserError(f"must be {expected} for a tiny model, got {value!r}", field=name)
        shape_ok = (
            self.intermediate_size >= 1
            and self.heads >= 1
            and self.hidden_size % self.heads == 0
            and self.kv_heads >= 1
            and self.heads % self.kv_heads == 0
        )
        if not shape_ok:
            raise UserError(
                f"{self.hidden_size} does not split into {self.heads} heads of "
                f"{self.kv_heads} KV heads",
                field="hidden_size",
            )
        params = self.params_estimate
        if params > MAX_PARAMS:
            raise UserError(
                f"{params / 1e6:,.0f} M parameters is not a tiny model (at most "
                f"{MAX_PARAMS / 1e6:.0f} M)",
                field="hidden_size" if self.hidden_size > 1024 else "layers",
            )

    @property
    def params_estimate(self) -> int:
        """Parameters: embeddings (tied or not, counted twice), attention and MLP per layer."""
        head_dim = self.hidden_size // max(self.heads, 1)
        attention = self.hidden_size * head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden_size * self.intermediate_size
        return 2 * self.vocab_size * self.hidden_size + self.layers * (attention + mlp)


@dataclass(slots=True, frozen=True)
class TinyModelInfo:
    """What :func:`build_tiny_model` wrote."""

    path: Path
    params: int
    size_bytes: int
    vocab_size: int
    files: tuple[str, ...]


def corpus_lines(seed: int, words: int = _CORPUS_WORDS) -> list[str]:
    """Deterministic pseudo-English: ``words`` words from a seeded generator, ~12 per line."""
    rng = np.random.default_rng(seed)
    onset = rng.integers(0, len(_ONSETS), size=(words, 3))
    vowel = rng.integers(0, len(_VOWELS), size=(words, 3))
    coda = rng.integers(0, len(_CODAS), size=(words, 3))
    # Zipf-like syllable counts and a few numbers make the merge statistics uneven, like text.
    syllables = rng.choice([1, 2, 3], p=[0.5, 0.35, 0.15], size=words)
    numbers = rng.integers(0, 10_000, size=words)
    number_at = rng.random(words) < 0.03
    punct_at = rng.random(words) < 0.08
    punct = rng.integers(0, len(_PUNCT), size=words)
    lines: list[str] = []
    line: list[str] = []
    for i in range(words):
        if number_at[i]:
            word = str(numbers[i])
        else:
            word = "".join(
                _ONSETS[onset[i, k]] + _VOWELS[vowel[i, k]] + _CODAS[coda[i, k]]
                for k in range(syllables[i])
            )
            if i % 17 == 0:
                word = word.capitalize()
        if punct_at[i]:
            word += _PUNCT[punct[i]]
        line.append(word)
        if len(line) >= 12:
            lines.append(" ".join(line))
            line = []
    if line:
        lines.append(" ".join(line))
    return lines


def train_tokenizer(vocab_size: int, seed: int) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` with exactly ``vocab_size`` tokens.

    Raises UserError when the corpus cannot give that many (only for absurd vocab sizes).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS[UNK_ID]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus_lines(seed), trainer=trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise UserError(
            f"tiny model: vocab_size={vocab_size} not reachable by BPE on the generated corpus "
            f"(got {tokenizer.get_vocab_size()})",
            hint="use a vocab_size up to about 20000",
        )
    return tokenizer


def _import_torch_stack() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as error:
        raise UserError(
            f"tiny-model needs torch and transformers ({error.name} is missing)",
            hint="pip install 'budgettune[torch]'",
        ) from None
    return torch, transformers


def _llama_config(spec: TinyModelSpec) -> dict[str, object]:
    # Written by hand rather than by LlamaConfig.save_pretrained so the folder does not depend on
    # the transformers version that built it (vLLM's own venv may carry another one).
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.hidden_size // spec.heads,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": None,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def _weights(spec: TinyModelSpec, torch: Any) -> dict[str, Tensor]:
    """Llama parameter names and shapes, normal(0, 0.02) like transformers' init; norms at 1."""
    gen = torch.Generator().manual_seed(spec.seed)
    head_dim = spec.hidden_size // spec.heads
    h, inter = spec.hidden_size, spec.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab_size, h)}
    for i in range(spec.layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (spec.heads * head_dim, h),
            p + "self_attn.k_proj.weight": (spec.kv_heads * head_dim, h),
            p + "self_attn.v_proj.weight": (spec.kv_heads * head_dim, h),
            p + "self_attn.o_proj.weight": (h, spec.heads * head_dim),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (spec.vocab_size, h)}
    tensors: dict[str, Tensor] = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            tensors[name] = torch.ones(shape, dtype=torch.bfloat16)
        else:
            values = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.02
            tensors[name] = values.to(torch.bfloat16).contiguous()
    return tensors


def _write_json(path: Path, document: Mapping[str, object]) -> None:
    write_atomic(path, json.dumps(document, indent=2, sort_keys=True) + "\n")


def build_tiny_model(
    out_dir: str | os.PathLike[str], spec: TinyModelSpec | None = None, *, overwrite: bool = False
) -> TinyModelInfo:
    """Write the tiny Llama (config.json, model.safetensors, tokenizer files) into ``out_dir``.

    Byte-for-byte deterministic for a given spec (seed included) and library versions. Raises
    UserError when ``out_dir`` is a non-empty folder and ``overwrite`` is false, when the spec is
    invalid, or when torch/transformers are not installed.
    """
    spec = spec or TinyModelSpec()
    spec.validate()
    out = Path(out_dir)
    if os.path.lexists(out) and not out.is_dir():
        raise UserError(f"DIR: {str(out)!r} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(
            f"DIR: folder {str(out)!r} is not empty", hint="pass --force to overwrite it"
        )
    torch, _ = _import_torch_stack()
    from safetensors.torch import save_file

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise storage_error(error, out) from None
    tokenizer = train_tokenizer(spec.vocab_size, spec.seed)
    tensors = _weights(spec, torch)
    _write_json(out / "config.json", _llama_config(spec))
    try:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save(str(out / "tokenizer.json"))
    except OSError as error:
        raise storage_error(error, out) from None
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": SPECIAL_TOKENS[BOS_ID],
            "eos_token": SPECIAL_TOKENS[EOS_ID],
            "unk_token": SPECIAL_TOKENS[UNK_ID],
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": spec.max_position_embeddings,
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    )
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "do_sample": False},
    )
    files = tuple(sorted(p.name for p in out.iterdir() if p.is_file()))
    return TinyModelInfo(
        path=out,
        params=sum(int(t.numel()) for t in tensors.values()),
        size_bytes=sum((out / f).stat().st_size for f in files),
        vocab_size=spec.vocab_size,
        files=files,
    )
