"""One exception tree for budgettune.

    BudgettuneError
    ├── UserError            bad input from the command line or a file; exit code 2, one line
    │   ├── SpecError        a malformed value of a field ("50mss", "lognormal:mean=x")
    │   └── TraceError       a bad trace file; carries file:line and the record's field
    ├── EngineError          an engine failed to start, crashed or misbehaved; carries its log tail
    └── StorageError         the machine could not hold a file (disk full, quota, I/O error); exit 1

Errors raised below the CLI name the *field* they are about (``field="max_num_seqs"``), never a
command-line flag: the library reads as a library. The CLI shows the field as the flag the user
typed (``--max-num-seqs: must be positive``) and never prints a traceback for these.
"""

from __future__ import annotations

SHOWN_CHARS = 80  # the most of one value an error message echoes


def shorten(text: object, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to about ``limit`` characters, for an error message that echoes a value: a
    262 KB header is not repeated back whole. The middle goes (its length said), the start and
    the end stay: the end often says where things were saved."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(limit - 24, 8)
    head, tail = text[: keep * 2 // 3], text[len(text) - keep // 3 :]
    return f"{head} ...({len(text) - len(head) - len(tail):,} characters)... {tail}"


class BudgettuneError(Exception):
    """Base of every error budgettune raises on purpose. ``message`` says what is wrong with
    ``field`` (a configuration field's name, None when no one field is to blame); ``hint`` what
    to do about it."""

    exit_code = 1

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.hint = hint

    def __str__(self) -> str:
        return self.shown_as(self.field)

    def shown_as(self, name: str | None) -> str:
        """The message with its field shown as ``name`` (the CLI passes the flag, e.g.
        ``--slo-tbt``); the bare message when there is no name."""
        return f"{name}: {self.message}" if name else self.message


class UserError(BudgettuneError):
    """The user gave something we cannot use; the message names the field and the value."""

    exit_code = 2


class SpecError(UserError):
    """A malformed value of a field, e.g. a duration, a distribution spec or a preset name."""


class TraceError(UserError):
    """A bad trace file. The message starts with ``FILE:LINE:`` when a line is to blame and
    names the record's field (``trace_field``, e.g. ``prompt_tokens``)."""

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
        self.trace_field = field


class EngineError(BudgettuneError):
    """An engine did not start, crashed, or answered nonsense. ``log_tail`` holds its last lines."""

    def __init__(
        self,
        message: str,
        *,
        log_tail: str = "",
        field: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, field=field, hint=hint)
        self.log_tail = log_tail


class StorageError(BudgettuneError):
    """A file could not be written (or read) for a reason of the machine, not of the input: the
    disk or a quota is full, the device failed. ``path`` is the file."""

    def __init__(
        self, message: str, *, path: str | None = None, field: str | None = None,
        hint: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message, field=field, hint=hint)
        self.path = path
