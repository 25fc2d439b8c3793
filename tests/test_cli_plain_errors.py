"""Errors, hints and warnings print their text as written: rich must not read ``[torch]`` in
``pip install 'budgettune[torch]'`` as a markup tag and drop it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from budgettune.cli import app
from budgettune.cli._common import print_error, print_warning
from budgettune.core.errors import UserError


def test_tiny_model_without_torch_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    result = CliRunner().invoke(app, ["tiny-model", str(tmp_path / "model")])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0] == "error: tiny-model needs torch and transformers (torch is missing)"
    assert lines[1] == "  hint: pip install 'budgettune[torch]'"


def test_brackets_in_message_hint_and_warning_survive(capsys: pytest.CaptureFixture[str]) -> None:
    print_error(UserError("value [bold]x[/bold] in a[0]", field="trace", hint="see [docs]"))
    print_warning("column [tokens] ignored")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: trace: value [bold]x[/bold] in a[0]",
        "  hint: see [docs]",
        "warning: column [tokens] ignored",
    ]
