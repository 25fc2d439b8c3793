"""Materialise a hostile case (:mod:`hostile_cases`): its folder, its files, the fixtures it
names, and its argv with the placeholders filled in; and judge its outcome. Shared by the
in-process tests and ``scripts/hostile_pass.py``."""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hostile_cases import GOOD_TRACE, Case, Fifo, Patch, PatchLine, Sparse

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "llama-3.1-8b_h100-sxm.json"
RUN_ARGS = (
    "sweep", "--engine", "sim", "--requests", "10", "--rate", "4", "--budgets", "512",
    "--baseline", "none", "--slo-tbt", "50ms",
)  # fmt: skip
RESULTS_ARGS = ("simulate", "--requests", "20", "--budgets", "512")
# A user's mistake prints at most this many lines, none longer than this.
MAX_ERROR_LINES = 4
MAX_LINE_CHARS = 400


@dataclass(frozen=True, slots=True)
class Fixtures:
    """Made once: a valid trace, a finished sweep's run folder, a results.json."""

    trace: Path
    run: Path
    results: Path


def make_fixtures(root: Path, budgettune: Callable[[Sequence[str]], None]) -> Fixtures:
    """The fixtures under ``root``; ``budgettune(argv)`` runs the command (and raises if it
    fails)."""
    root.mkdir(parents=True, exist_ok=True)
    trace = root / "trace.jsonl"
    trace.write_bytes(GOOD_TRACE)
    run = root / "run"
    if not (run / "recommendation.json").is_file():
        shutil.rmtree(run, ignore_errors=True)
        budgettune([*RUN_ARGS, "-o", str(run)])
    sim = root / "sim"
    if not (sim / "results.json").is_file():
        shutil.rmtree(sim, ignore_errors=True)
        budgettune([*RESULTS_ARGS, "-o", str(sim)])
    return Fixtures(trace, run, sim / "results.json")


def _patched(document: str, key: str, value: str | None) -> str:
    data = json.loads(document)
    *path, name = key.split(".")
    target = data
    for part in path:  # a list's item by its index
        target = target[int(part)] if isinstance(target, list) else target[part]
    if isinstance(target, list):  # an item is replaced, never removed
        assert value is not None
        target[int(name)] = "__PATCH__"
        return json.dumps(data).replace('"__PATCH__"', value, 1)
    if value is None:
        target.pop(name, None)
        return json.dumps(data)
    target[name] = "__PATCH__"
    return json.dumps(data).replace('"__PATCH__"', value, 1)


def _write(path: Path, content: object, writers: list[threading.Thread]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, Sparse):
        with open(path, "wb") as handle:
            handle.truncate(content.size)
    elif isinstance(content, Fifo):
        path.unlink(missing_ok=True)
        os.mkfifo(path)

        def feed(data: bytes = content.data) -> None:
            try:
                with open(path, "wb") as handle:  # blocks until a reader opens it
                    handle.write(data)
            except OSError:
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        writers.append(writer)
    elif isinstance(content, Patch):
        base = PROFILE if content.shipped_profile else path
        path.write_text(_patched(base.read_text(), content.key, content.value))
    elif isinstance(content, PatchLine):
        first, _, rest = path.read_text().partition("\n")
        path.write_text(_patched(first, content.key, content.value) + "\n" + rest)
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)


def prepare(
    case: Case, folder: Path, fixtures: Fixtures
) -> tuple[list[str], list[threading.Thread]]:
    """Make ``folder`` hold what the case needs; returns its argv and any FIFO writers."""
    folder.mkdir(parents=True, exist_ok=True)
    run = folder / "run"
    if "run" in case.needs:
        shutil.copytree(fixtures.run, run)
    results = folder / "results.json"
    if "results" in case.needs:
        shutil.copy(fixtures.results, results)
    writers: list[threading.Thread] = []
    for name, content in case.files:
        _write(folder / name, content, writers)
    values = {
        "d": str(folder),
        "trace": str(fixtures.trace),
        "run": str(run),
        "results": str(results),
        "profile": str(PROFILE),
    }
    argv = [re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], arg) for arg in case.argv]
    return argv, writers


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a case ended: ``outcome`` is one of clean, traceback, hang, memory, accepted,
    wrong-code, wordy, wrong-words; ``detail`` says why."""

    outcome: str
    detail: str = ""

    @property
    def clean(self) -> bool:
        return self.outcome == "clean"


def judge(
    case: Case, code: int | None, output: str, *, hung: bool = False, over_memory: bool = False
) -> Verdict:
    """The verdict on one run of ``case``: exit ``code`` (None: killed) and its ``output``."""
    if over_memory:
        return Verdict("memory", "over the memory cap")
    if hung:
        return Verdict("hang", "over the time limit")
    if "Traceback (most recent call last)" in output or code not in (0, 1, 2, 3, 130):
        tail = output.strip().splitlines()[-1:] or [""]
        return Verdict("traceback", f"exit {code}: {tail[0][:200]}")
    if code in (0, 3):
        return Verdict("accepted", f"exit {code}")
    if code != case.expect:
        return Verdict("wrong-code", f"exit {code}, expected {case.expect}: {_first(output)}")
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    if not errors:
        return Verdict("wrong-words", f"no error line: {_first(output)}")
    if case.expect == 2 and (
        len(lines) > MAX_ERROR_LINES or max(len(line) for line in lines) > MAX_LINE_CHARS
    ):
        return Verdict("wordy", f"{len(lines)} lines, longest {max(map(len, lines))} chars")
    if case.says and case.says not in output:
        return Verdict("wrong-words", f"does not say {case.says!r}: {_first(output)}")
    return Verdict("clean")


def _first(output: str) -> str:
    for line in output.splitlines():
        if "error:" in line:
            return line.strip()[:200]
    return output.strip()[:200]
