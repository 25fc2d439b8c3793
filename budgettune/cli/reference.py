"""The whole command line loaded at once, for the documentation's CLI reference: mkdocs-typer2
runs ``typer budgettune.cli.reference utils docs``, which reads ``app`` from here. Every
command's module is imported, so each command lists its options (``budgettune`` itself loads a
command only when it runs, and its lazy stand-ins have none)."""

from __future__ import annotations

import importlib

from budgettune.cli import COMMANDS, app

for _module, _summary in COMMANDS.values():
    importlib.import_module(_module)

__all__ = ["app"]
