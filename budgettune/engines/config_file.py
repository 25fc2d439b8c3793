"""The user's own engine config file (``vllm serve --config prod.yaml``, SGLang's ``--config``)
as the engines read it: a YAML mapping whose keys are flag names, with dashes or underscores
(``max_num_seqs`` is ``--max-num-seqs``), flags on the command line winning over the file. A
value is a scalar, a list (several values) or a mapping (passed as JSON: vLLM's
``speculative-config``, ``compilation-config``). ``key: true`` sets a switch; ``key: false``
sets vLLM's ``--no-key`` where that flag exists (vLLM 0.32's
``FlexibleArgumentParser.load_config_file``) and is otherwise left out, which leaves a switch
at its default, off.

:func:`read_engine_config` checks a file once, before anything is launched; every launch then
passes it whole with ``--config``, and the written config is the same file with the answer set.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from budgettune.core.errors import UserError, shorten

MAX_CONFIG_BYTES = 1 << 20  # a flag file is a few hundred bytes; a megabyte is not a config


@dataclass(slots=True, frozen=True)
class EngineConfigFile:
    """A checked config file: its path and text (what every launch reads), and its settings by
    flag name with dashes (``max-num-seqs``), values as YAML gave them."""

    path: Path
    text: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    spelled: Mapping[str, str] = field(default_factory=dict)  # flag name -> the file's own key

    def has(self, flag: str) -> bool:
        return flag in self.settings

    def value(self, flag: str) -> Any:
        return self.settings.get(flag)


def flag_name(key: str) -> str:
    """A config key as the flag it sets, as vLLM spells it: dashes, no leading ones."""
    return key.strip().lstrip("-").replace("_", "-")


def flag_settings(words: tuple[str, ...] | list[str]) -> dict[str, object]:
    """Pass-through engine flags (``--enforce-eager --swap-space 8``) as config keys: a flag
    alone is ``true``, one value is that value (a number where it reads as one), several are a
    list, ``--key=value`` one value; words before the first flag are dropped (none are passed
    so). What a config file written from them starts is what the command line started."""
    settings: dict[str, object] = {}
    key: str | None = None
    for word in words:
        if word.startswith("--"):
            name, eq, value = word[2:].partition("=")
            key = flag_name(name)
            settings[key] = _number(value) if eq else True
            if eq:
                key = None
        elif key is not None:
            held = settings[key]
            if held is True:
                settings[key] = _number(word)
            elif isinstance(held, list):
                held.append(_number(word))
            else:
                settings[key] = [held, _number(word)]
    return settings


def _number(word: str) -> object:
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def read_engine_config(path: Path, *, suffixes: tuple[str, ...] = ()) -> EngineConfigFile:
    """Read and check ``path``: a YAML mapping of flag names to values, named with one of
    ``suffixes`` where the engine asks for one (vLLM and SGLang: .yaml or .yml). Raises UserError
    (field ``engine_config``) naming the file for anything else."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    where = str(path)
    if suffixes and path.suffix.lower() not in suffixes:
        raise UserError(
            f"{where}: the engine reads a config file only when it is named "
            f"{' or '.join('*' + s for s in suffixes)}",
            field="engine_config",
        )
    try:
        raw = path.read_bytes()[: MAX_CONFIG_BYTES + 1]
    except OSError as error:
        raise UserError(
            f"cannot read {path}: {error.strerror or error}", field="engine_config"
        ) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise UserError(f"{where}: more than 1 MB, not a config file", field="engine_config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text", field="engine_config") from None
    try:
        data = YAML(typ="safe", pure=True).load(io.StringIO(text))
    except YAMLError as error:
        reason = shorten(str(error).splitlines()[0] if str(error) else type(error).__name__)
        raise UserError(f"{where}: not YAML ({reason})", field="engine_config") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(
            f"{where}: expected a mapping of flag names to values, got {type(data).__name__}",
            field="engine_config",
        )
    settings: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not flag_name(key):
            raise UserError(f"{where}: key {shorten(repr(key))} is not a flag name",
                            field="engine_config")  # fmt: skip
        name = flag_name(key)
        if name in settings:
            raise UserError(
                f"{where}: {spelled[name]!r} and {key!r} set the same flag --{name}",
                field="engine_config",
            )
        settings[name] = value
        spelled[name] = key
    return EngineConfigFile(path=path.resolve(), text=text, settings=settings, spelled=spelled)


def check_config_keys(
    config: EngineConfigFile,
    managed: Mapping[str, str],
    given: Mapping[str, str],
) -> None:
    """Refuse a key budgettune sets itself (``managed``: flag -> the option to use instead) and a
    key also given another way (``given``: flag -> how, e.g. ``--max-num-seqs 16``); UserError
    (field ``engine_config``) naming the key, in the file's own spelling."""
    for name, key in config.spelled.items():
        flag = f"--{name}"
        if flag in managed:
            raise UserError(
                f"{config.path}: {key!r} is set by budgettune for every launch; "
                f"use {managed[flag]} instead",
                field="engine_config",
            )
        if flag in given:
            raise UserError(
                f"{config.path}: {key!r} is also given as {given[flag]}; give it once",
                field="engine_config",
            )


def redacted_text(config: EngineConfigFile) -> str:
    """The file's text as a run folder keeps it: the value of every key whose name holds a
    credential (``api-key``, ``hf-token``: the ``--env`` rule) replaced by ``***``, all else as
    written. The file itself is what launches read; this is what is recorded of it."""
    from ruamel.yaml import YAML

    from budgettune.core.auth import HIDDEN, secret_name

    secret = [key for name, key in config.spelled.items() if secret_name(name.replace("-", "_"))]
    if not secret:
        return config.text
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    data = yaml.load(config.text)
    for key in secret:
        data[key] = HIDDEN
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()
