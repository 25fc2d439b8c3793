"""The hostile tests' shared fixture: a trace, a finished sweep's run folder and a simulate
results.json, made once per session in-process (see hostile_setup.make_fixtures)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hostile_setup import Fixtures, make_fixtures
from typer.testing import CliRunner

from budgettune.cli import app


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    root = tmp_path_factory.mktemp("hostile-fixtures")

    def budgettune(argv: Sequence[str]) -> None:
        result = CliRunner().invoke(app, list(argv))
        assert result.exit_code == 0, result.output[-2000:]

    return make_fixtures(root, budgettune)
