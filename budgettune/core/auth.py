"""The bearer header of vLLM's ``--api-key``, in one place: the load generator sends it with
every request and the engine lifecycle with its readiness checks (neither layer may import the
other). And which engine environment variables are secrets, kept out of every file."""

from __future__ import annotations

import re
from collections.abc import Sequence

from budgettune.core.errors import UserError

HIDDEN = "***"  # what a file shows in place of a secret
# Environment variable names that hold credentials: HF_TOKEN, HUGGING_FACE_HUB_TOKEN,
# VLLM_API_KEY, OPENAI_API_KEY, AWS_SECRET_ACCESS_KEY, a *_PASSWORD, *_CREDENTIALS, *_AUTH.
_SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)


def secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a credential."""
    return bool(_SECRET_NAME.search(name))


def hide_env(items: Sequence[str]) -> list[str]:
    """``--env NAME=VALUE`` items as files record them: a secret's value replaced by ``***``
    (``--resume`` asks for it again, or takes it from budgettune's own environment)."""
    shown = []
    for item in items:
        name, eq, _ = item.partition("=")
        shown.append(f"{name}={HIDDEN}" if eq and secret_name(name.strip()) else item)
    return shown


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
