"""The synthetic traces shipped in traces/ are exactly what traces/regenerate.sh produces."""

from __future__ import annotations

import shlex
import subprocess
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


def test_readme_lists_the_public_traces_and_ships_none_of_them() -> None:
    readme = (TRACES / "README.md").read_text()
    table = readme[readme.index("## Public traces you can download") :]
    for row_start, fmt, licence in (
        ("| Azure LLM inference trace 2023", "`azure`", "CC-BY 4.0"),
        ("| Azure LLM inference trace 2024", "`azure`", "CC-BY 4.0"),
        ("| Mooncake", "`mooncake`", "Apache 2.0"),
        ("| BurstGPT", "`burstgpt`", "CC-BY 4.0"),
    ):
        row = next(line for line in table.splitlines() if line.startswith(row_start))
        assert fmt in row and licence in row, row
    # the repository ships only what the project generates itself (and its script and README)
    listed = subprocess.run(
        ["git", "ls-files", "traces"], cwd=TRACES.parent, capture_output=True, text=True
    )
    if listed.returncode == 0 and listed.stdout.strip():
        shipped = {Path(line).name for line in listed.stdout.split()}
        assert shipped == {"README.md", "regenerate.sh", "chat.jsonl", "rag.jsonl"}
    # the commands the README shows are the ones the script runs
    shown = " ".join(readme.split("```bash")[1].split("```")[0].replace("\\\n", " ").split())
    for args in synth_commands():
        assert " ".join(["budgettune", *args]) in shown
