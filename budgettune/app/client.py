"""The load generator's options (a :class:`~budgettune.app.requests.ClientRequest`) validated for
``replay`` and ``sweep``: the endpoint, closed-loop concurrency, usage in every chunk, the API
key and the prompts' form (text made with the model's tokenizer, or token ids), and what results
record of them (whether a key was used, never the key; the command line with its ``--api-key``
value hidden)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from budgettune.app.requests import ClientRequest
from budgettune.core.auth import (
    HIDDEN,
    hide_env,
    hide_values,
    register_secrets,
    secret_values,
)
from budgettune.core.errors import SpecError
from budgettune.core.limits import MAX_SEQS, check_count
from budgettune.core.units import parse_duration_s
from budgettune.loadgen.client import Endpoint
from budgettune.loadgen.runner import RunOptions
from budgettune.loadgen.text_prompts import tokenizer_file

PROMPT_FORMS = ("auto", "text", "ids")
# Engines that tokenize a text prompt with the model's own tokenizer, and whose model names the
# tokenizer: prompts go as text by default there, as every real request does.
TOKENIZING_ENGINES = ("vllm", "sglang", "trtllm")

KEY_OPTION = "--api-key"
ENV_OPTION = "--env"


@dataclass(slots=True, frozen=True)
class ClientSettings:
    """A checked :class:`ClientRequest`: ``api_key`` None when none was given (or it was
    empty)."""

    endpoint: Endpoint
    concurrency: int | None
    continuous_usage: bool
    api_key: str | None = field(default=None, repr=False)
    prompt_form: str = "auto"  # as asked; ``ids`` or ``text`` once :meth:`for_engine` decided
    tokenizer_asked: str | None = None
    tokenizer: str | None = None  # the tokenizer.json text prompts are made with

    def to_json(self) -> dict[str, object]:
        """What results.json and sweep.json record: the key only as whether one was used, and
        what the prompts were sent as (``text`` with the tokenizer file, or ``ids``)."""
        return {
            "endpoint": self.endpoint.value,
            "concurrency": self.concurrency,
            "continuous_usage_stats": self.continuous_usage,
            "api_key_used": self.api_key is not None,
            "prompt_form": self.prompt_form,
            "tokenizer": self.tokenizer,
        }

    def prompts_line(self) -> str:
        """What the prompts are sent as, in words."""
        if self.endpoint is Endpoint.CHAT:
            return "chat messages (text; the chat template adds the server's own tokens)"
        if self.tokenizer is None:
            return "token ids (--prompt-form text with --tokenizer sends text)"
        return f"text of exactly the scheduled tokens on {self.tokenizer}, tokenized by the server"

    def for_engine(self, engine: str, model: str | None) -> ClientSettings:
        """These settings with the prompts' form decided for ``engine`` serving ``model``.

        ``auto`` is text where a tokenizer is at hand (``--tokenizer``, or a real engine's model
        folder or cached model id), else ids: the embedded engine, and a server you run without
        ``--tokenizer``. ``text`` without a tokenizer is refused (SpecError). The chat API sends
        text whatever the form."""
        form = self.prompt_form
        if self.endpoint is Endpoint.CHAT:
            return replace(self, prompt_form="text", tokenizer=None)
        if form == "ids":
            return replace(self, tokenizer=None)
        found = None
        if self.tokenizer_asked is not None:
            found = tokenizer_file(self.tokenizer_asked)
            if found is None:
                raise SpecError(
                    f"no tokenizer.json at {self.tokenizer_asked!r} (a model folder, a "
                    "tokenizer.json, or a model id in the Hugging Face cache)",
                    field="tokenizer",
                )
        elif engine in TOKENIZING_ENGINES and model:
            found = tokenizer_file(model)
        if found is None and form == "text":
            raise SpecError(
                f"text prompts need the model's tokenizer, and none is at hand for "
                f"{model or 'the ' + engine + ' engine'}",
                field="prompt_form",
                hint="give a model folder or tokenizer.json with --tokenizer, or send token ids "
                "with --prompt-form ids",
            )
        if found is None:
            return replace(self, prompt_form="ids", tokenizer=None)
        return replace(self, prompt_form="text", tokenizer=str(found))

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
            tokenizer=self.tokenizer,
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
    if key is not None:
        register_secrets([key])  # hidden in every file, wherever else it appears
    form = request.prompt_form.strip().lower()
    if form not in PROMPT_FORMS:
        raise SpecError(
            f"unknown prompt form {request.prompt_form!r}; use {', '.join(PROMPT_FORMS)}",
            field="prompt_form",
        )
    tokenizer = (request.tokenizer or "").strip() or None
    if form == "ids" and tokenizer is not None:
        raise SpecError(
            "token ids need no tokenizer; drop --tokenizer, or send text with --prompt-form text",
            field="tokenizer",
        )
    return ClientSettings(
        endpoint, request.concurrency, request.continuous_usage_stats, key, form, tokenizer
    )


def without_secrets(command: Sequence[str]) -> tuple[str, ...]:
    """The command line as results record it: the value of ``--api-key KEY`` (or
    ``--api-key=KEY``) replaced by ``***``, and so is a secret's in ``--env NAME=VALUE``
    (HF_TOKEN, *_API_KEY: :func:`budgettune.core.auth.secret_name`)."""
    shown: list[str] = []
    secrets = secret_values(*_given_secrets(command))
    after = ""  # the option the previous argument was, when it takes a value
    for arg in command:
        if after == KEY_OPTION:
            shown.append(HIDDEN)
        elif after == ENV_OPTION:
            shown += hide_env([arg])
        elif arg.startswith(KEY_OPTION + "="):
            shown.append(f"{KEY_OPTION}={HIDDEN}")
        elif arg.startswith(ENV_OPTION + "="):
            shown.append(f"{ENV_OPTION}={hide_env([arg.removeprefix(ENV_OPTION + '=')])[0]}")
        else:  # a secret given once is hidden wherever else it is typed, and URL passwords
            shown.append(hide_values(arg, secrets))
        after = arg if arg in (KEY_OPTION, ENV_OPTION) and after == "" else ""
    return tuple(shown)


def _given_secrets(command: Sequence[str]) -> tuple[list[str], str | None]:
    """The ``--env`` items and the ``--api-key`` value typed in ``command``."""
    env: list[str] = []
    key = None
    for before, arg in zip(["", *command], command, strict=False):
        if before == ENV_OPTION:
            env.append(arg)
        elif arg.startswith(ENV_OPTION + "="):
            env.append(arg.removeprefix(ENV_OPTION + "="))
        elif before == KEY_OPTION:
            key = arg
        elif arg.startswith(KEY_OPTION + "="):
            key = arg.removeprefix(KEY_OPTION + "=")
    return env, key
