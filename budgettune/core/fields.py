"""Typed reads of one parsed JSON object, for every reader of a document (the artifacts, the
profile, a model's config.json): each raises a one-line UserError naming the file (and line)
and the field, e.g. ``points.jsonl:3: field 'budget': expected a whole number, got 'x'``.
``true`` is not a number, numbers are finite, and a caller may bound a value
(``integer("budget", minimum=1, maximum=MAX_TOKENS)``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from budgettune.core import jsonio
from budgettune.core.errors import UserError

_MISSING = object()


@dataclass(frozen=True, slots=True)
class Fields:
    """One JSON object read field by field; ``where`` names it in errors ("points.jsonl:3",
    "recommendation.json: points[0]"); a nested object's fields are named ``parent.field``."""

    data: Mapping[str, Any]
    where: str
    prefix: str = ""

    @classmethod
    def of(cls, value: object, where: str) -> Fields:
        if not isinstance(value, Mapping):
            raise UserError(f"{where}: expected an object, got {_show(value)}")
        return cls(value, where)

    def fail(self, name: str, expected: str, value: object) -> NoReturn:
        raise UserError(
            f"{self.where}: field '{self.prefix}{name}': expected {expected}, got {_show(value)}"
        )

    def has(self, name: str) -> bool:
        return name in self.data

    def _get(self, name: str, required: bool) -> object:
        value = self.data.get(name, _MISSING)
        if value is _MISSING:
            if required:
                raise UserError(f"{self.where}: field '{self.prefix}{name}' is missing")
            return None
        return value

    def integer(self, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
        value = self._get(name, True)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(name, "a whole number", value)
        self._bounded(name, value, minimum, maximum)
        return value

    def integer_or_none(
        self, name: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> int | None:
        if self._get(name, False) is None:
            return None
        return self.integer(name, minimum=minimum, maximum=maximum)

    def number(
        self, name: str, *, minimum: float | None = None, maximum: float | None = None
    ) -> float:
        value = self._get(name, True)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(name, "a number", value)
        if not math.isfinite(value):
            self.fail(name, "a finite number", value)
        self._bounded(name, value, minimum, maximum)
        return value

    def number_or_none(
        self, name: str, *, minimum: float | None = None, maximum: float | None = None
    ) -> float | None:
        if self._get(name, False) is None:
            return None
        return self.number(name, minimum=minimum, maximum=maximum)

    def _bounded(
        self, name: str, value: float, minimum: float | None, maximum: float | None
    ) -> None:
        if minimum is not None and value < minimum:
            self.fail(name, f"at least {minimum:,}", value)
        if maximum is not None and value > maximum:
            self.fail(name, f"at most {maximum:,}", value)

    def text(self, name: str) -> str:
        value = self._get(name, True)
        if not isinstance(value, str):
            self.fail(name, "text", value)
        return value

    def text_or_none(self, name: str) -> str | None:
        return None if self._get(name, False) is None else self.text(name)

    def flag(self, name: str) -> bool:
        value = self._get(name, True)
        if not isinstance(value, bool):
            self.fail(name, "true or false", value)
        return value

    def flag_or_none(self, name: str) -> bool | None:
        return None if self._get(name, False) is None else self.flag(name)

    def mapping_or_none(self, name: str) -> Mapping[str, Any] | None:
        value = self._get(name, False)
        if value is not None and not isinstance(value, Mapping):
            self.fail(name, "an object", value)
        return value

    def child(self, name: str) -> Fields:
        """A nested object, its fields named ``name.field`` in errors."""
        value = self._get(name, True)
        if not isinstance(value, Mapping):
            self.fail(name, "an object", value)
        return Fields(value, self.where, f"{self.prefix}{name}.")

    def child_or_none(self, name: str) -> Fields | None:
        return None if self._get(name, False) is None else self.child(name)

    def items(self, name: str) -> list[Any]:
        value = self._get(name, True)
        if not isinstance(value, list):
            self.fail(name, "a list", value)
        return value

    def texts_or_empty(self, name: str) -> tuple[str, ...]:
        """A list of texts (absent or null: none); a text alone or a number is refused, not
        read character by character."""
        if self._get(name, False) is None:
            return ()
        found = self.items(name)
        if not all(isinstance(item, str) for item in found):
            self.fail(name, "a list of texts", found)
        return tuple(found)

    def integers_or_empty(
        self, name: str, *, minimum: int | None = None, maximum: int | None = None
    ) -> tuple[int, ...]:
        """A list of whole numbers within the bounds (absent or null: none)."""
        if self._get(name, False) is None:
            return ()
        found = self.items(name)
        for item in found:
            if isinstance(item, bool) or not isinstance(item, int):
                self.fail(name, "a list of whole numbers", found)
            self._bounded(name, item, minimum, maximum)
        return tuple(found)


def check_schema(data: Mapping[str, Any], where: str, supported: int) -> int:
    """The document's ``schema_version``: a whole number this budgettune reads, else UserError
    (missing, not a whole number, or newer than ``supported``)."""
    version = data.get("schema_version", _MISSING)
    if version is _MISSING:
        raise UserError(f"{where}: field 'schema_version' is missing")
    if isinstance(version, bool) or not isinstance(version, int):
        raise UserError(
            f"{where}: field 'schema_version': expected a whole number, got {_show(version)}"
        )
    if version > supported:
        raise UserError(
            f"{where}: field 'schema_version': {version} is newer than this budgettune reads "
            f"({supported})",
            hint="upgrade budgettune",
        )
    if version < 1:
        raise UserError(f"{where}: field 'schema_version': expected 1 or more, got {version}")
    return version


def read_json_object(
    path: Path, what: str, *, max_bytes: int = jsonio.DOCUMENT_BYTES
) -> Mapping[str, Any]:
    """The JSON object in ``path``, read within the bounds of :mod:`budgettune.core.jsonio`;
    UserError naming the file when it is missing, too large, not UTF-8, not JSON, too deep or
    not an object (``what``: "results", "sweep settings", ...)."""
    data = jsonio.read_json(path, what, max_bytes=max_bytes)
    if not isinstance(data, Mapping):
        raise UserError(f"{path}: not a budgettune {what} file (not a JSON object)")
    return data


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
