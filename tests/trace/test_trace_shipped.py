"""The synthetic traces shipped in traces/ are exactly what traces/regenerate.sh produces."""

from __future__ import annotations

import shlex
from pathlib import Path

from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.trace.inspect import trace_stats
from budgettune.trace.load import load_trace

TRACES = Path(__file__).resolve().parents[2] / "traces"


def synth_commands() -> list[list[str]]:
    script = (TRACES / "regenerate.sh").read_text()
    return [
        shlex.split(line)[1:]
        for line in script.splitlines()
        if line.startswith("budgettune trace synth")
    ]


def test_regenerate_script_reproduces_the_shipped_files(tmp_path: Path) -> None:
    commands = synth_commands()
    assert len(commands) == 2
    for args in commands:
        shipped = TRACES.parent / args[args.index("-o") + 1]
        args[args.index("-o") + 1] = str(tmp_path / shipped.name)
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert (tmp_path / shipped.name).read_bytes() == shipped.read_bytes(), shipped.name


def test_shipped_traces_have_their_documented_shape() -> None:
    chat, _ = load_trace(TRACES / "chat.jsonl")
    rag, _ = load_trace(TRACES / "rag.jsonl")
    chat_stats, rag_stats = trace_stats(chat), trace_stats(rag)
    assert chat_stats.requests == 1000 and rag_stats.requests == 500
    assert chat.prefix_group is not None and set(chat.prefix_group.tolist()) == {0, 1, 2, 3}
    assert rag.prefix_tokens is not None and rag.prefix_tokens.max() == 1024
    assert rag_stats.prompt_tokens.mean > 5 * chat_stats.prompt_tokens.mean
    assert rag.prompt_tokens.min() >= 1000 and rag.prompt_tokens.max() <= 30_000
    # gamma arrivals with burstiness 0.5 are burstier than Poisson
    assert rag_stats.interarrival_cv is not None and rag_stats.interarrival_cv > 1.2
