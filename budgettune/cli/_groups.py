"""Option groups: typer options defined once, shared by several commands, and handed to the
command packed into the app's request object.

A group is a request dataclass (from :mod:`budgettune.app`) and one ``Annotated`` typer option
per field. ``@with_groups(traffic=TRAFFIC)`` on a command whose signature has a parameter
``traffic: TrafficRequest`` puts the group's options in that parameter's place (so ``--help``
lists them where they were) and calls the command with ``traffic=TrafficRequest(...)``: no
command copies the block of options, and none passes them on keyword by keyword.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, TypeVar, get_type_hints

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(slots=True, frozen=True)
class OptionGroup:
    """``options``: field name -> ``Annotated[type, typer.Option(...)]``, or another group for a
    field that is a group of its own (the model's calibration); each is a field of ``request``,
    whose default is the option's, and the request is built from their values (lists become
    tuples)."""

    request: type
    options: dict[str, object]

    def __post_init__(self) -> None:
        known = {field.name for field in fields(self.request)}
        unknown = set(self.options) - known
        assert not unknown, f"{self.request.__name__} has no field {sorted(unknown)}"

    def worded(self, **options: object) -> OptionGroup:
        """The same group with some options worded for one command (same names, defaults)."""
        return OptionGroup(self.request, {**self.options, **options})

    def parameters(self) -> list[inspect.Parameter]:
        """The options as keyword parameters of a command, with the request's defaults."""
        defaults = {field.name: field.default for field in fields(self.request)}
        parameters: list[inspect.Parameter] = []
        for name, kind in self.options.items():
            if isinstance(kind, OptionGroup):
                parameters += kind.parameters()
                continue
            parameters.append(
                inspect.Parameter(
                    name,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=kind,
                    default=_shown(defaults[name]),
                )
            )
        return parameters

    def pack(self, values: dict[str, object]) -> Any:
        """The request from the options' values (removed from ``values``)."""
        given = {
            name: kind.pack(values) if isinstance(kind, OptionGroup) else values.pop(name)
            for name, kind in self.options.items()
        }
        return self.request(
            **{name: tuple(v) if isinstance(v, list) else v for name, v in given.items()}
        )


def _shown(default: Any) -> Any:
    """A tuple default as typer shows a repeatable option's (a list)."""
    return list(default) if isinstance(default, tuple) else default


def with_groups(**groups: OptionGroup) -> Callable[[F], F]:
    """Expand each named parameter of the decorated command into its group's options and pack
    them back into the group's request when the command is called."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command)
        hints = get_type_hints(command, include_extras=True)  # in the command's module
        parameters: list[inspect.Parameter] = []
        for parameter in signature.parameters.values():
            if parameter.name in groups:
                parameters += groups[parameter.name].parameters()
            else:
                parameters.append(
                    parameter.replace(
                        kind=inspect.Parameter.KEYWORD_ONLY,
                        annotation=hints.get(parameter.name, parameter.annotation),
                    )
                )

        @functools.wraps(command)
        def packed(**values: Any) -> Any:
            for name, group in groups.items():
                values[name] = group.pack(values)
            return command(**values)

        packed.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        packed.__annotations__ = {p.name: p.annotation for p in parameters}
        del packed.__wrapped__  # typer reads the signature above, not the command's
        return packed  # type: ignore[return-value]

    return decorate
