"""One exception tree for budgettune.

    BudgettuneError
    ├── UserError            bad input from the command line or a file; exit code 2, one line
    │   ├── SpecError        a malformed option value ("50mss", "lognormal:mean=x")
    │   └── TraceError       a bad trace file; carries file:line and field
    └── EngineError          an engine failed to start, crashed or misbehaved; carries its log tail

The CLI prints ``str(error)`` (plus ``hint`` when set) and never a traceback for these.
"""

from __future__ import annotations


class BudgettuneError(Exception):
    """Base of every error budgettune raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UserError(BudgettuneError):
    """The user gave something we cannot use; the message names the option and the value."""

    exit_code = 2


class SpecError(UserError):
    """A malformed value of an option, e.g. a duration, a distribution spec or a preset name."""


class TraceError(UserError):
    """A bad trace file. The message starts with ``FILE:LINE:`` when a line is to blame."""

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}{what}{message}", hint=hint)
        self.path = path
        self.line = line
        self.field = field


class EngineError(BudgettuneError):
    """An engine did not start, crashed, or answered nonsense. ``log_tail`` holds its last lines."""

    def __init__(self, message: str, *, log_tail: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail
