"""`budgettune tiny-model DIR`: write the tiny random-weight Llama used by tests and CPU demos."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from budgettune.cli import Command, app
from budgettune.cli._common import console, print_json


@app.command("tiny-model", cls=Command)
def tiny_model(
    out_dir: Annotated[Path, typer.Argument(metavar="DIR", help="Folder to write the model into.")],
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of the weights and the tokenizer corpus.")
    ] = 0,
    layers: Annotated[int, typer.Option("--layers", help="Decoder layers.")] = 4,
    hidden_size: Annotated[int, typer.Option("--hidden-size", help="Hidden size.")] = 256,
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", help="Tokenizer and embedding size.")
    ] = 4096,
    max_model_len: Annotated[
        int, typer.Option("--max-model-len", help="max_position_embeddings, tokens.")
    ] = 8192,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a non-empty DIR.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
) -> None:
    """Build a tiny random-weight Llama (4 layers, hidden 256, ~11 MB) with a locally trained
    byte-level BPE tokenizer, in a folder `vllm serve` and transformers load. Deterministic from
    --seed. Needs `pip install 'budgettune\\[torch]'`.
    """
    from budgettune.app.tiny_model import TinyModelSpec, build_tiny_model

    spec = TinyModelSpec.sized(
        layers=layers,
        hidden_size=hidden_size,
        vocab_size=vocab_size,
        max_model_len=max_model_len,
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
