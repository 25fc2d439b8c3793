"""The load generator's options (a :class:`~budgettune.app.requests.ClientRequest`) validated for
``replay`` and ``sweep``: the endpoint, closed-loop concurrency, usage in every chunk and the
API key, and what results record of them (whether a key was used, never the key; the command
line with its ``--api-key`` value hidden)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from budgettune.app.requests import ClientRequest
from budgettune.core.errors import SpecError
from budgettune.core.limits import MAX_SEQS, check_count
from budgettune.core.units import parse_duration_s
from budgettune.loadgen.client import Endpoint
from budgettune.loadgen.runner import RunOptions

KEY_OPTION = "--api-key"
HIDDEN = "***"


@dataclass(slots=True, frozen=True)
class ClientSettings:
    """A checked :class:`ClientRequest`: ``api_key`` None when none was given (or it was
    empty)."""

    endpoint: Endpoint
    concurrency: int | None
    continuous_usage: bool
    api_key: str | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, object]:
        """What results.json and sweep.json record: the key only as whether one was used."""
        return {
            "endpoint": self.endpoint.value,
            "concurrency": self.concurrency,
            "continuous_usage_stats": self.continuous_usage,
            "api_key_used": self.api_key is not None,
        }

    def run_options(
        self, *, request_timeout: str, max_error_rate: float | None, seed: int, warmup: int
    ) -> RunOptions:
        """The load generator's options for a run with this client: ``request_timeout`` parsed
        (SpecError naming it), the rest as given."""
        return RunOptions(
            max_error_rate=max_error_rate,
            request_timeout_s=parse_duration_s(request_timeout, field="request_timeout"),
            seed=seed,
            warmup_requests=warmup,
            endpoint=self.endpoint,
            concurrency=self.concurrency,
            continuous_usage=self.continuous_usage,
        )

    def describe(self, traffic: str) -> str:
        """The traffic's description with the closed loop said, when there is one."""
        if self.concurrency is None:
            return traffic
        return f"{traffic}; closed loop, {self.concurrency} in flight (arrival times not used)"


def client_settings(request: ClientRequest) -> ClientSettings:
    """Check the load generator's options. Raises SpecError naming the field."""
    try:
        endpoint = Endpoint(request.endpoint.strip().lower())
    except ValueError:
        known = ", ".join(e.value for e in Endpoint)
        raise SpecError(
            f"unknown API {request.endpoint!r}; use {known}", field="endpoint"
        ) from None
    if request.concurrency is not None and request.concurrency < 1:
        raise SpecError(f"must be 1 or more, got {request.concurrency}", field="concurrency")
    if request.concurrency is not None:
        check_count(request.concurrency, field="concurrency", maximum=MAX_SEQS, what="requests")
    key = (request.api_key or "").strip() or None
    return ClientSettings(endpoint, request.concurrency, request.continuous_usage_stats, key)


def without_key(command: Sequence[str]) -> tuple[str, ...]:
    """The command line as results record it: the value of ``--api-key KEY`` (or
    ``--api-key=KEY``) replaced by ``***``."""
    shown: list[str] = []
    hide_next = False
    for arg in command:
        if hide_next:
            shown.append(HIDDEN)
            hide_next = False
        elif arg == KEY_OPTION:
            shown.append(arg)
            hide_next = True
        elif arg.startswith(KEY_OPTION + "="):
            shown.append(f"{KEY_OPTION}={HIDDEN}")
        else:
            shown.append(arg)
    return tuple(shown)
