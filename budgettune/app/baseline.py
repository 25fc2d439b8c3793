"""`sweep --baseline`: the budget the verdict compares with, parsed once. ``auto`` is the engine's
own default (asked of the installed engine, or its table), ``none`` is no comparison, and a
number of tokens is the budget the user runs today."""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.engine_defaults import DefaultBudget
from budgettune.core.errors import SpecError
from budgettune.core.limits import check_tokens


@dataclass(slots=True, frozen=True)
class Baseline:
    """``tokens`` is set for a number; ``auto`` and ``none`` have none."""

    kind: str  # "auto", "none" or "tokens"
    tokens: int | None = None

    @classmethod
    def parse(cls, text: str) -> Baseline:
        choice = text.strip().lower()
        if choice in ("auto", "none"):
            return cls(choice)
        try:
            value = int(choice)
        except ValueError:
            raise SpecError(
                f"use auto, none or a number of tokens, got {text!r}", field="baseline"
            ) from None
        return cls("tokens", check_tokens(value, field="baseline"))

    @property
    def is_auto(self) -> bool:
        return self.kind == "auto"

    @property
    def is_none(self) -> bool:
        return self.kind == "none"

    def budget(self, defaults: DefaultBudget | None) -> int | None:
        """The reference budget: the engine's default for auto (None when unknown), the number
        given, or None for none."""
        if self.is_auto:
            return None if defaults is None else defaults.budget_tokens
        return self.tokens

    @property
    def label(self) -> str:
        """How the verdict names the reference budget."""
        return "Your engine default" if self.is_auto else "Your current budget"

    def line(self, defaults: DefaultBudget | None) -> str:
        """What the sweep says about its reference budget."""
        if self.is_auto and defaults is not None:
            return f"engine default budget {defaults.budget_tokens} ({defaults.rule})"
        if self.is_none:
            return "no reference budget (--baseline none)"
        return f"reference budget {self.budget(defaults)} (--baseline)"
