"""The hostile inputs of :mod:`hostile_cases`, one table-driven test per command, run in-process
through typer's CliRunner (a subprocess each would cost a second of start-up per case): every
one must end with its exit code (2 for a user's mistake, 1 for the environment), a few short
lines that say what the case expects, and no traceback. The cases that need a real process (a
pipe, a FIFO, a name lookup) run through the installed command in test_hostile_process.py;
``scripts/hostile_pass.py`` runs the whole table that way, with time and memory caps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile_cases import Case, Kind
from hostile_setup import Fixtures, Verdict, judge, prepare
from hostile_table import by_command
from typer.testing import CliRunner

from budgettune.cli import app

TABLE = by_command()
# The session fixture (a finished sweep, about 12 s) is made once: every test that uses it on
# one xdist worker (scripts/test-fast.sh runs --dist loadgroup).
pytestmark = pytest.mark.xdist_group("hostile-fixtures")


def _in_process(cases: list[Case]) -> list[Case]:
    return [case for case in cases if case.kind is Kind.ANY]


def _ids(case: Case) -> str:
    return case.id


def run_case(case: Case, folder: Path, fixtures: Fixtures) -> Verdict:
    """The case in-process, in its own folder as the working directory."""
    argv, writers = prepare(case, folder, fixtures)
    here = os.getcwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(app, argv, input=case.stdin)
    finally:
        os.chdir(here)
    for writer in writers:
        writer.join(timeout=1)
    error = result.exception
    if error is not None and not isinstance(error, SystemExit):
        return Verdict("traceback", f"{type(error).__name__}: {error}"[:300])
    return judge(case, result.exit_code, result.output)


def _check(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    verdict = run_case(case, tmp_path / "case", fixtures)
    assert verdict.clean, f"{verdict.outcome}: {verdict.detail}"


@pytest.mark.parametrize("case", _in_process(TABLE["simulate"]), ids=_ids)
def test_simulate_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["roofline"]), ids=_ids)
def test_roofline_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["trace synth"]), ids=_ids)
def test_trace_synth_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["trace inspect"]), ids=_ids)
def test_trace_inspect_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["report"]), ids=_ids)
def test_report_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["sweep"]), ids=_ids)
def test_sweep_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["replay"]), ids=_ids)
def test_replay_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.timeout(60)  # a case that is not refused would serve until stopped
@pytest.mark.parametrize("case", _in_process(TABLE["serve"]), ids=_ids)
def test_serve_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["profile"]), ids=_ids)
def test_profile_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


@pytest.mark.parametrize("case", _in_process(TABLE["tiny-model"]), ids=_ids)
def test_tiny_model_refuses(case: Case, tmp_path: Path, fixtures: Fixtures) -> None:
    _check(case, tmp_path, fixtures)


def test_every_command_has_a_table() -> None:
    """Each command of the CLI has hostile cases (a new command needs its own)."""
    from budgettune.cli import COMMANDS

    named = {case.command.split()[0] for cases in TABLE.values() for case in cases}
    assert set(COMMANDS) <= named, set(COMMANDS) - named
