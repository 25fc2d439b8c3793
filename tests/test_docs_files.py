"""docs/files.md documents every field of every JSON document budgettune writes: a tiny sweep,
replay, simulation and analytic profile on the built-in engine (no GPU, nothing downloaded,
about 10 s, run side by side) write fresh documents, and every field they hold must be on the
page, or the test names it, by document.

The page's convention, which this test reads:

- A document or a block is a heading with an id, ``### sweep.json { #sweep-json }``; its section
  runs to the next heading.
- A field entry is a list item that begins with one or more field paths in backticks, separated
  by commas, then a colon: ``- `slo.tbt_ms`, `slo.ttft_ms`: the SLOs, milliseconds.``, its text
  running on over indented lines. ``[]`` in a path marks list items for the reader and is
  ignored here; a segment in angle brackets (``predictions.<budget>``) stands for any key.
- An entry whose text links to a section of the page (``[prediction](#predicted)``) documents
  what lies under its path in that section. A link to ``#options`` says: each key under it is an
  option of the command that wrote the document, by its flat name (``--slo-tbt``: ``slo_tbt``).

A field (a key holding a value that is not an object or a list of objects; an empty object or
list counts as one) is documented when the longest entry that begins its path is the field
itself, or links to a section that documents the rest of it. Each document is looked up in the
sections listed for it below. Every file the sweep, the replay and the simulation write into
their folders is named on the page too, in backticks (numbers in a name as ``N`` or ``LABEL``).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

# One worker makes the documents once (scripts/test-fast.sh runs --dist loadgroup).
pytestmark = pytest.mark.xdist_group("docs-files")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "files.md"
ANY = "\0"  # a path segment that matches any entry segment: an empty object's contents
TINY = ("--prompt-dist", "fixed:300", "--output-dist", "fixed:10", "--rate", "20")
COMMANDS = {
    "sweep": ["sweep", "--engine", "sim", "--budgets", "512,1024", "--requests", "10", *TINY,
              "--slo-tbt", "200ms", "--slo-ttft", "5s", "--max-replays", "1"],
    "replay": ["replay", "--engine", "sim", "--budget", "512", "--requests", "10", *TINY,
               "--slo-tbt", "200ms"],
    "simulate": ["simulate", "--budgets", "512,none", "--requests", "20", *TINY, "--goodput",
                 "--slo-tbt", "50ms"],
    "profile": ["profile", "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu",
                "h100-sxm"],
}  # fmt: skip
BUDGET_SECTIONS = ("results-json", "budget-results-json", "replay-results-json")
SIMULATE_SECTIONS = ("results-json", "simulate-results-json")
# Each document: the command that wrote it, its file in that command's output, and the page's
# sections its fields are looked up in.
DOCUMENTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sweep.json": ("sweep", "sweep.json", ("sweep-json",)),
    "points.jsonl": ("sweep", "points.jsonl", ("point",)),
    "recommendation.json": ("sweep", "recommendation.json", ("recommendation-json",)),
    "the sweep's results.json": ("sweep", "results.json", ("results-json", "sweep-results-json")),
    "budget-N/results.json": ("sweep", "budget-*/results.json", BUDGET_SECTIONS),
    "vllm.yaml": ("sweep", "vllm.yaml", ("engine-configs",)),
    "replay's results.json": ("replay", "results.json", ("results-json", "replay-results-json")),
    "simulate's results.json": ("simulate", "results.json", SIMULATE_SECTIONS),
    "the profile JSON": ("profile", "profile.json", ("profile-json",)),
    "the profile CSV": ("profile", "profile.csv", ("profile-csv",)),
}
# How a written file's name is given on the page, numbers standing for a budget.
NAME_PLACEHOLDER = {"sweep": "N", "replay": "LABEL", "simulate": "N"}


@dataclass
class Entry:
    """One field entry: the paths it documents (segments) and the sections its text links to."""

    paths: list[tuple[str, ...]]
    links: list[str] = field(default_factory=list)


HEADING = re.compile(r"^#{1,6} .*?(?:\{\s*#([\w-]+)\s*\})?\s*$")
ENTRY = re.compile(r"^- ((?:`[^`]+`\s*,\s*)*`[^`]+`):\s")
LINK = re.compile(r"\]\(#([\w-]+)\)")


def read_page(text: str) -> dict[str, list[Entry]]:
    """Every section with an id and the field entries in it."""
    sections: dict[str, list[Entry]] = {}
    current: list[Entry] | None = None
    item: list[str] = []

    def close() -> None:
        joined = " ".join(part.strip() for part in item)
        found = ENTRY.match(joined)
        if found and current is not None:
            paths = [
                tuple(path.replace("[]", "").split("."))
                for path in re.findall(r"`([^`]+)`", found.group(1))
            ]
            current.append(Entry(paths, LINK.findall(joined)))
        item.clear()

    for line in text.splitlines():
        heading = HEADING.match(line)
        if heading:
            close()
            current = sections.setdefault(heading.group(1), []) if heading.group(1) else None
        elif line.startswith("- "):
            close()
            item.append(line)
        elif line.startswith("  ") and item:
            item.append(line)
        else:
            close()
    close()
    return sections


@cache
def option_names(command: str) -> frozenset[str]:
    """The flat names of a command's options (its parameters' names), from the real command."""
    import typer

    from budgettune.cli.reference import app

    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    return frozenset(str(param.name) for param in params)


def leaf_paths(value: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every field's path: list items share their list's path; an empty object's contents are
    ``ANY``."""
    if isinstance(value, dict):
        if not value:
            yield (*prefix, ANY)
        for key, item in value.items():
            yield from leaf_paths(item, (*prefix, str(key)))
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for item in value:
            yield from leaf_paths(item, prefix)
    else:
        yield prefix


def _matches(entry: tuple[str, ...], path: tuple[str, ...]) -> bool:
    return len(entry) <= len(path) and all(
        e == p or p == ANY or (e.startswith("<") and e.endswith(">"))
        for e, p in zip(entry, path, strict=False)
    )


def documented(
    path: tuple[str, ...],
    sections: Sequence[str],
    page: dict[str, list[Entry]],
    command: str,
    depth: int = 0,
) -> bool:
    """Whether ``path`` is documented in ``sections`` (see the module's docstring)."""
    longest = 0
    best: list[Entry] = []
    for section in sections:
        for entry in page[section]:
            for entry_path in entry.paths:
                if _matches(entry_path, path):
                    if len(entry_path) > longest:
                        longest, best = len(entry_path), []
                    if len(entry_path) == longest:
                        best.append(entry)
    rest = path[longest:]
    if not best or not rest:
        return bool(best)
    if depth > 10:
        return False
    for entry in best:
        for link in entry.links:
            if link == "options":
                if len(rest) == 1 and (rest[0] == ANY or rest[0] in option_names(command)):
                    return True
            elif documented(rest, [link], page, command, depth + 1):
                return True
    return False


def undocumented(
    document: Any, sections: Sequence[str], page: dict[str, list[Entry]], command: str
) -> list[str]:
    """The paths of the fields of ``document`` the page does not document, sorted."""
    missing = {
        ".".join(part for part in path if part != ANY)
        for path in leaf_paths(document)
        if not documented(path, sections, page, command)
    }
    return sorted(missing)


def read_document(path: Path) -> Any:
    """A JSON document; points.jsonl as the list of its lines; a YAML file of flags or a CSV
    as an object of its keys or columns."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if path.suffix == ".yaml":
        lines = [line for line in text.splitlines() if line and not line.startswith("#")]
        return {line.split(":", 1)[0]: None for line in lines}
    if path.suffix == ".csv":
        return dict.fromkeys(text.splitlines()[0].split(","))
    return json.loads(text)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, budgettune_cmd: list[str]) -> Path:
    """A folder per command (``sweep``, ``replay``, ``simulate``, ``profile``), each holding
    what the command wrote; the four run at once."""
    root = tmp_path_factory.mktemp("written")
    running = {}
    for name, args in COMMANDS.items():
        out = root / name
        target = out / "profile.json" if name == "profile" else out
        log = (root / f"{name}.log").open("w")
        argv = [*budgettune_cmd, *args, "-o", str(target)]
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        running[name] = (process, log)
    failed = []
    try:
        for name, (process, _) in running.items():
            code = process.wait(timeout=240)
            if code != 0:
                tail = (root / f"{name}.log").read_text()[-3000:]
                failed.append(f"budgettune {name} exited {code}:\n{tail}")
    finally:
        for process, log in running.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    assert not failed, "\n".join(failed)
    return root


def test_every_field_of_every_document_is_on_the_page(written: Path) -> None:
    page = read_page(PAGE.read_text())
    missing = []
    for label, (command, pattern, sections) in DOCUMENTS.items():
        files = sorted((written / command).glob(pattern))
        assert files, f"{command} wrote no {pattern}"
        fields: set[str] = set()
        for path in files:
            fields.update(undocumented(read_document(path), sections, page, command))
        if fields:
            missing.append(f"  {label}: {', '.join(sorted(fields))}")
    assert not missing, "docs/files.md does not document these fields:\n" + "\n".join(missing)


def test_every_file_written_is_named_on_the_page(written: Path) -> None:
    text = PAGE.read_text()
    unnamed = set()
    for command, placeholder in NAME_PLACEHOLDER.items():
        folder = written / command
        for path in folder.rglob("*"):
            if path.is_file():
                name = re.sub(r"\d+", placeholder, str(path.relative_to(folder)))
                if f"`{name}`" not in text:
                    unnamed.add(f"{command}: {name}")
    assert not unnamed, f"docs/files.md names no {sorted(unnamed)}"


def test_the_check_names_what_the_page_lacks() -> None:
    """The check can fail: fields the page does not have are named, nested ones by their path,
    and a key under `options` that is no option of the command."""
    page = read_page(PAGE.read_text())
    document = {
        "schema_version": 1,
        "no_such_field": 1,
        "choice": {"headline": "Recommended: 512.", "no_such_reason": "x"},
        "predictions": {"512": {"tbt_ms": {"p50": 1.0, "p42": 2.0}}},
        "points": [{"budget": 512, "selfcheck": {"sent": 3, "sent_late": 0}}],
        "settings": {"options": {"slo_tbt": "50ms", "no_such_option": 1}},
    }
    assert undocumented(document, ["recommendation-json"], page, "sweep") == [
        "choice.no_such_reason",
        "no_such_field",
        "points.selfcheck.sent_late",
        "predictions.512.tbt_ms.p42",
        "settings.options.no_such_option",
    ]


def test_the_page_keeps_to_100_columns() -> None:
    long = [n for n, line in enumerate(PAGE.read_text().splitlines(), 1) if len(line) > 100]
    assert not long, f"docs/files.md lines over 100 characters: {long}"
