"""`sweep --resume DIR` alone: the request the sweep in DIR was started with, saved in its
``sweep.json`` as a flat JSON object of option names (the app's ``SweepRequest.options()``; the
layout every sweep.json with ``options`` has used), read back, and those given again checked
against it (a different question is refused, naming every option that differs)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from budgettune.artifacts.runfolder import read_settings
from budgettune.core.auth import hide_env
from budgettune.core.errors import BudgettuneError, UserError
from budgettune.core.units import parse_duration_s, parse_int_list

OPTIONS_KEY = "options"  # in sweep.json: every option as the sweep resolved it
# How to run rather than what to ask: these may change on resume (the engine moved to another
# venv, a start needed more time); every other option defines the question.
FREE_ON_RESUME = frozenset(
    {
        "engine_cmd",
        "env",
        "health_timeout",
        "request_timeout",
        "max_error_rate",
        "as_json",
        "api_key",
        "max_replays",
        "parallel",
        "gpus",
        "ray",
    }
)
# The API key is a secret: read again on resume (--api-key or the environment), never saved.
NOT_SAVED = frozenset({"output", "resume", "as_json", "api_key"})
_DURATIONS = frozenset({"slo_tbt", "slo_ttft", "duration", "request_timeout", "health_timeout"})
_PATHS = frozenset({"trace", "profile"})
_KEYWORDS = frozenset({"analytic"})  # --profile analytic is no path


def saved_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options to record in sweep.json, JSON-ready (paths as text; a secret's value in
    ``--env`` hidden, as the API key is left out)."""
    saved = {
        name: str(value) if isinstance(value, Path) else value
        for name, value in options.items()
        if name not in NOT_SAVED
    }
    if saved.get("env"):
        saved["env"] = hide_env(saved["env"])
    return saved


def read_saved_options(run_dir: Path) -> dict[str, Any] | None:
    """The options saved in ``run_dir``'s sweep.json; None for a sweep saved before they were.
    Raises UserError when ``run_dir`` holds no sweep."""
    options = read_settings(run_dir).get(OPTIONS_KEY)
    return dict(options) if isinstance(options, Mapping) else None


def restore_options(
    run_dir: Path,
    saved: Mapping[str, Any],
    current: Mapping[str, Any],
    given: set[str],
    flags: Mapping[str, str],
) -> dict[str, Any]:
    """``current`` (every option, defaults included) with each one not in ``given`` (typed on
    the command line) replaced by its saved value. Raises UserError naming, in one line, every
    given option that asks a different question than the saved sweep."""
    differing = [
        name
        for name in sorted(given & saved.keys())
        if name not in FREE_ON_RESUME and not _same(name, current[name], saved[name])
    ]
    if differing:
        was = ", ".join(f"{flags.get(n, n)} {_show(saved[n])}" for n in differing)
        now = ", ".join(f"{flags.get(n, n)} {_show(current[n])}" for n in differing)
        raise UserError(
            f"{run_dir} was a sweep with {was}; this command gives {now}",
            field="resume",
            hint="drop those options to continue it, or start a new sweep in another folder",
        )
    restored = dict(current)
    for name, value in saved.items():
        if name in current and name not in given:
            restored[name] = Path(value) if name in _PATHS and value is not None else value
    return restored


def _show(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


def _same(name: str, given: Any, saved: Any) -> bool:
    """Whether a given option means what the saved one did ("50ms" is "0.05s", a relative
    trace path is the same file, --engine auto accepts whatever auto chose then)."""
    if name == "engine" and str(given).strip().lower() == "auto":
        return True
    if given is None or saved is None:
        return given is None and saved is None
    try:
        if name in _DURATIONS:
            return parse_duration_s(str(given), field=name) == parse_duration_s(
                str(saved), field=name
            )
        if name == "budgets":
            return parse_int_list(str(given), field=name) == parse_int_list(str(saved), field=name)
    except BudgettuneError:
        pass  # a malformed value: compare it as text (and fail later where it is parsed)
    if name in _PATHS and str(given) not in _KEYWORDS and str(saved) not in _KEYWORDS:
        return Path(str(given)).resolve() == Path(str(saved)).resolve()
    if isinstance(given, list | tuple) or isinstance(saved, list | tuple):
        return list(given) == list(saved)
    if isinstance(given, int | float) and isinstance(saved, int | float):
        return float(given) == float(saved)
    return str(given) == str(saved)
