"""`budgettune tiny-model DIR`: write the tiny random-weight Llama used by tests and CPU demos."""

from __future__ import annotations

from pathlib import Path

import typer

from budgettune.app.tiny_model import TinyModelSpec, build_tiny_model
from budgettune.cli import Command, app
from budgettune.cli._common import console, print_json


@app.command("tiny-model", cls=Command)
def tiny_model(
    out_dir: Path = typer.Argument(..., metavar="DIR", help="Folder to write the model into."),
    seed: int = typer.Option(0, "--seed", help="Seed of the weights and the tokenizer corpus."),
    layers: int = typer.Option(4, "--layers", help="Decoder layers."),
    hidden_size: int = typer.Option(256, "--hidden-size", help="Hidden size."),
    vocab_size: int = typer.Option(4096, "--vocab-size", help="Tokenizer and embedding size."),
    max_model_len: int = typer.Option(
        8192, "--max-model-len", help="max_position_embeddings, tokens."
    ),
    force: bool = typer.Option(False, "--force", help="Overwrite a non-empty DIR."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Build a tiny random-weight Llama (4 layers, hidden 256, ~11 MB) with a locally trained
    byte-level BPE tokenizer, in a folder `vllm serve` and transformers load. Deterministic from
    --seed. Needs `pip install 'budgettune\\[torch]'`.
    """
    spec = TinyModelSpec(
        layers=layers,
        hidden_size=hidden_size,
        # Keep the default 4 heads / 2 KV heads unless the hidden size cannot hold them.
        heads=4 if hidden_size % 4 == 0 else 1,
        kv_heads=2 if hidden_size % 4 == 0 else 1,
        intermediate_size=3 * hidden_size,
        vocab_size=vocab_size,
        max_position_embeddings=max_model_len,
        seed=seed,
    )
    info = build_tiny_model(out_dir, spec, overwrite=force)
    if as_json:
        print_json(
            {
                "path": str(info.path),
                "params": info.params,
                "size_bytes": info.size_bytes,
                "vocab_size": info.vocab_size,
                "files": list(info.files),
            }
        )
        return
    console.print(
        f"wrote {info.path}: Llama, {spec.layers} layers, hidden {spec.hidden_size}, "
        f"{info.params / 1e6:.2f} M parameters, vocab {info.vocab_size}, "
        f"{info.size_bytes / 1e6:.1f} MB",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"serve it: python -m vllm.entrypoints.openai.api_server --model {info.path} "
        "--dtype float32",
        highlight=False,
        soft_wrap=True,
    )
