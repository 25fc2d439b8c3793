"""The bearer header of vLLM's ``--api-key``, in one place: the load generator sends it with
every request and the engine lifecycle with its readiness checks (neither layer may import the
other). And which engine environment variables are secrets, kept out of every file."""

from __future__ import annotations

import re
from collections.abc import Sequence

from budgettune.core.errors import UserError

HIDDEN = "***"  # what a file shows in place of a secret
# Environment variable names that hold credentials: HF_TOKEN, HUGGING_FACE_HUB_TOKEN,
# VLLM_API_KEY, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, a *_PASSWORD, *_PASSPHRASE,
# *_CREDENTIALS, *_AUTH.
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH", re.IGNORECASE)
# A URL's password (scheme://user:PASSWORD@host): hidden whatever the variable is called.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):(?P<password>[^/@\s]+)@")
# A secret value shorter than this is not searched for elsewhere: "1" would hide every digit.
MIN_SECRET_CHARS = 6


def secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a credential."""
    return bool(_SECRET_NAME.search(name))


def hide_env(items: Sequence[str]) -> list[str]:
    """``--env NAME=VALUE`` items as files record them: a secret's value replaced by ``***``,
    and a URL's password in any value (``postgres://u:***@host/db``); ``--resume`` asks for
    either again, or takes it from budgettune's own environment."""
    shown = []
    for item in items:
        name, eq, value = item.partition("=")
        if eq and secret_name(name.strip()):
            shown.append(f"{name}={HIDDEN}")
        else:
            shown.append(f"{name}{eq}{hide_userinfo(value)}" if eq else item)
    return shown


def hide_userinfo(text: str) -> str:
    """``text`` with every URL's password written ``***``."""
    return _USERINFO.sub(lambda found: f"{found['head']}:{HIDDEN}@", text)


def has_hidden_userinfo(text: str) -> bool:
    """Whether ``text`` holds a URL whose password a record hid."""
    return f":{HIDDEN}@" in text


def secret_values(env_items: Sequence[str], api_key: str | None = None) -> list[str]:
    """The values to hide wherever else they appear: the API key and every secret ``--env``
    value, those of at least MIN_SECRET_CHARS characters, longest first."""
    found = [api_key] if api_key else []
    for item in env_items:
        name, eq, value = item.partition("=")
        if eq and secret_name(name.strip()) and value != HIDDEN:
            found.append(value)
    return sorted({v for v in found if len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)


def hide_values(text: str, values: Sequence[str]) -> str:
    """``text`` with each of ``values`` (secrets) and every URL's password written ``***``."""
    for value in values:
        text = text.replace(value, HIDDEN)
    return hide_userinfo(text)


def check_api_key(api_key: str | None) -> None:
    """Refuse a key no HTTP header can carry (RFC 9110 field values: visible ASCII, spaces and
    tabs between): a line break or a non-ASCII letter would otherwise fail inside every request,
    where it reads as a server that never answers. The key itself is never printed."""
    if not api_key:
        return
    for position, char in enumerate(api_key, start=1):
        if char == "\t" or " " <= char <= "~":
            continue
        what = (
            "a line break" if char in "\r\n"
            else "a control character" if ord(char) < 0x20 or ord(char) == 0x7F
            else "a non-ASCII character"
        )  # fmt: skip
        raise UserError(
            f"the API key holds {what} at character {position}: an HTTP header cannot carry it",
            field="api_key",
            hint="give the key exactly as the server was started with it (printable ASCII)",
        )


def bearer_headers(api_key: str | None) -> dict[str, str]:
    """``Authorization: Bearer KEY`` for a server started with ``--api-key``; none without."""
    check_api_key(api_key)
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


# The secrets this command was given (the API key, each secret --env value), longest first: every
# file budgettune writes hides them wherever they appear (core/files), not only where they were
# typed. Kept sorted here, not at each write: a results.json is written in many small pieces.
_GIVEN: tuple[str, ...] = ()


def register_secrets(values: Sequence[str]) -> None:
    """Add ``values`` to the secrets every written file hides (those of at least
    MIN_SECRET_CHARS characters)."""
    global _GIVEN
    kept = {*_GIVEN, *(value for value in values if len(value) >= MIN_SECRET_CHARS)}
    _GIVEN = tuple(sorted(kept, key=len, reverse=True))


def forget_secrets() -> None:
    """A new command starts with none (the CLI calls this first)."""
    global _GIVEN
    _GIVEN = ()


def hide_given(text: str) -> str:
    """``text`` with every registered secret written ``***``."""
    for value in _GIVEN:
        text = text.replace(value, HIDDEN)
    return text


def secrets_given() -> bool:
    return bool(_GIVEN)
