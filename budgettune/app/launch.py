"""Which engine to run and how to launch it: ``--engine auto``'s choice, and the LaunchSpec
built from a :class:`LaunchRequest` (the budget and log path are set per launch)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from budgettune.app.baseline import Baseline
from budgettune.app.requests import DEFAULT_MODEL, LaunchRequest, SweepRequest
from budgettune.core.auth import (
    HIDDEN,
    check_api_key,
    has_hidden_userinfo,
    register_secrets,
    secret_name,
)
from budgettune.core.errors import SpecError, shorten
from budgettune.core.hardware import ModelShape, check_model_len, check_split, resolve_model
from budgettune.core.limits import MAX_GPUS, MAX_SEQS, check_count, check_share
from budgettune.core.units import parse_duration_s, parse_int_list
from budgettune.engines.base import ConfigFileKeys, LaunchSpec
from budgettune.engines.config_file import EngineConfigFile

REAL_ENGINE_HEALTH_S = 20 * 60.0  # vLLM and SGLang load weights and compile: allow 20 minutes
SIM_HEALTH_S = 120.0


def split_words(text: str, *, field: str) -> list[str]:
    """``text`` split as a POSIX shell would split it (quotes group, nothing is run); an
    unbalanced quote is a SpecError naming ``field``."""
    try:
        return shlex.split(text)
    except ValueError as error:  # "No closing quotation", "No escaped character"
        raise SpecError(
            f"cannot split {shorten(repr(text))} into words: {str(error).lower()}", field=field
        ) from None


def parse_env(items: tuple[str, ...] | list[str]) -> dict[str, str]:
    """KEY=VALUE pairs; an item without '=' or with an empty key is an error naming it. A
    secret saved hidden (``HF_TOKEN=***``, read back by ``--resume``) takes its value from
    budgettune's own environment, or is an error asking for it again."""
    env: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise SpecError(f"expected KEY=VALUE, got {shorten(repr(item))}", field="env")
        if (value == HIDDEN and secret_name(key)) or has_hidden_userinfo(value):
            if key not in os.environ:
                raise SpecError(
                    f"{key} is a secret the saved sweep does not keep; set {key} in "
                    f"budgettune's environment, or give every --env again",
                    field="env",
                    hint="budgettune writes no secret into a run folder (HF_TOKEN, *_API_KEY, "
                    "*_SECRET*, *_PASSWORD: their values read ***, and so does a URL's "
                    "password)",
                )
            value = os.environ[key]
        env[key] = value
    register_secrets([v for k, v in env.items() if secret_name(k)])  # hidden in every file
    return env


def launch_spec(
    launch: LaunchRequest,
    *,
    engine: str,
    model: str | None,
    gpu: str | None,
    url: str | None,
    max_model_len_tokens: int | None,
    api_key: str | None = None,
    several_seqs: bool = False,
) -> LaunchSpec:
    """Validate the launch options into a LaunchSpec for ``engine``; ``api_key`` is the key the
    engine is started with (or the external server demands). ``several_seqs``: the caller
    tunes max-num-seqs over several values (the spec then leaves it unset: each launch sets
    its own); otherwise at most one is taken."""
    check_api_key(api_key)  # before anything starts: a bad key fails every request
    caching = prefix_caching_choice(launch.prefix_caching, engine)
    config_path = None
    if launch.engine_config is not None:
        from budgettune.engines.config_file import read_engine_config

        keys = config_keys_for(engine)
        config = read_engine_config(launch.engine_config, suffixes=keys.suffixes)
        config_path = config.path
        on, said = file_prefix_caching(config, keys)
        if on is not None and launch.prefix_caching.strip().lower() == "engine":
            caching = PrefixCachingChoice(on, f"the user's engine config: {said}")
    share = launch.gpu_memory_utilization
    if share is not None:
        check_share(share, field="gpu_memory_utilization")
    seqs = max_num_seqs_values(launch)
    if (len(seqs) > 1 or seqs_auto(launch)) and not several_seqs:
        raise SpecError(f"one value here, got {launch.max_num_seqs!r}", field="max_num_seqs")
    if launch.tensor_parallel_size is not None:
        check_count(launch.tensor_parallel_size, field="tensor_parallel_size", maximum=MAX_GPUS)
        shape = known_shape(model or (DEFAULT_MODEL if engine == "sim" else None))
        if shape is not None:  # the engine would refuse the split at its start: refuse it now
            check_split(shape, launch.tensor_parallel_size, field="tensor_parallel_size")
    extra: list[str] = []
    for item in launch.engine_arg:
        extra += split_words(item, field="engine_arg")
    command = (
        tuple(split_words(launch.engine_cmd, field="engine_cmd")) if launch.engine_cmd else None
    )
    if launch.engine_cmd is not None and not command:  # "" or only spaces
        raise SpecError("empty command", field="engine_cmd")
    from budgettune.engines.registry import check_engine_args

    check_engine_args(engine, tuple(extra))
    if engine == "sim" and command is None:  # the built-in engine: its model is known here
        check_model_len(resolve_model(model or DEFAULT_MODEL), max_model_len_tokens)
    default_health_s = SIM_HEALTH_S if engine == "sim" else REAL_ENGINE_HEALTH_S
    health_s = (
        parse_duration_s(launch.health_timeout, field="health_timeout")
        if launch.health_timeout
        else default_health_s
    )
    return LaunchSpec(
        max_num_seqs=seqs[0] if len(seqs) == 1 else None,
        model=model,
        gpu=gpu if engine == "sim" else None,
        max_model_len=max_model_len_tokens,
        extra_args=tuple(extra),
        env=parse_env(launch.env),
        engine_cmd=command,
        health_timeout_s=health_s,
        url=url,
        dtype=launch.dtype,
        tensor_parallel_size=launch.tensor_parallel_size,
        gpu_memory_utilization=share,
        prefix_caching=bool(caching.on),
        prefix_caching_by=caching.why,
        engine_config=config_path,
        api_key=api_key,
    )


PREFIX_CACHING_VALUES = ("engine", "on", "off")


@dataclasses.dataclass(slots=True, frozen=True)
class PrefixCachingChoice:
    """Prefix caching for a launch: ``on`` (None: not budgettune's to set, an external server
    runs as its owner set it) and who decided it, in words (a launch's facts say so)."""

    on: bool | None
    why: str


def prefix_caching_choice(text: str, engine: str) -> PrefixCachingChoice:
    """``--prefix-caching engine|on|off`` for ``engine``: ``engine`` (the default) is what the
    engine does when not told, which is what the user deploys. Raises SpecError naming
    ``prefix_caching`` for another value, or on|off for a server budgettune does not start."""
    from budgettune.engines.registry import prefix_caching_default

    value = text.strip().lower()
    if value not in PREFIX_CACHING_VALUES:
        raise SpecError(f"use engine, on or off, got {shorten(repr(text))}", field="prefix_caching")
    default = prefix_caching_default(engine)
    if default is None:
        if value != "engine":
            raise SpecError(
                "budgettune does not start this server, so it cannot set its prefix cache; "
                "leave --prefix-caching out (it is measured as it runs)",
                field="prefix_caching",
            )
        return PrefixCachingChoice(None, "the server's own setting (budgettune did not start it)")
    if value == "engine":
        state = "on" if default.on else "off"
        return PrefixCachingChoice(default.on, f"the engine's default, {state}: {default.source}")
    return PrefixCachingChoice(value == "on", f"the user: --prefix-caching {value}")


def prefix_caching_setting(engine: str, on: bool) -> bool | None:
    """What a written engine config says of prefix caching: ``on`` where it is not
    ``engine``'s default, else None (the file leaves the engine's default alone)."""
    from budgettune.engines.registry import prefix_caching_default

    default = prefix_caching_default(engine)
    return None if default is None or default.on == on else on


SEQS_AUTO = "auto"  # --max-num-seqs auto: sweep picks the values it tunes with the budget


def seqs_auto(launch: LaunchRequest) -> bool:
    """Whether --max-num-seqs asks the sweep to pick the values it tunes (``auto``)."""
    return (launch.max_num_seqs or "").strip().lower() == SEQS_AUTO


def tunes_seqs(launch: LaunchRequest) -> bool:
    """Whether --max-num-seqs asks for a second knob: several values, or ``auto``."""
    return seqs_auto(launch) or len(max_num_seqs_values(launch)) > 1


def max_num_seqs_values(launch: LaunchRequest) -> tuple[int, ...]:
    """The --max-num-seqs values given, ascending and without repeats (empty: none given, or
    ``auto``). Raises SpecError naming ``max_num_seqs`` for a value that is not a whole number
    in [1, MAX_SEQS]."""
    if launch.max_num_seqs is None or seqs_auto(launch):
        return ()
    values = parse_int_list(launch.max_num_seqs, field="max_num_seqs", maximum=MAX_SEQS)
    return tuple(sorted(set(values)))


def budget_spec(base: LaunchSpec, budget: int, run_dir: Path) -> LaunchSpec:
    """How a sweep starts the engine to measure ``budget``: its base spec at that budget,
    chunked prefill on, the log in the run folder as ``engine-BUDGET.log``."""
    return dataclasses.replace(
        base, budget_tokens=budget, chunked_prefill=True, log_path=run_dir / f"engine-{budget}.log"
    )


def resolve_engine(engine: str, url: str | None, engine_cmd: str | None) -> tuple[str, str]:
    """The engine to use and a one-line reason. ``auto`` picks vLLM when it is installed and a
    GPU is visible, else the built-in simulated engine; a URL means the external engine.
    Raises SpecError for an engine no one knows."""
    from budgettune.engines.registry import engine_names

    name = engine.strip().lower()
    if url is not None:
        if name not in ("auto", "external"):
            raise SpecError(f"measures a running server; drop --engine {engine}", field="url")
        return "external", f"measuring the server at {url} (nothing launched)"
    if name == "auto":
        vllm = engine_cmd is not None or shutil.which("vllm") is not None
        gpu = _gpu_visible()
        if vllm and gpu:
            return "vllm", "engine auto: vLLM is installed and a GPU is visible, so using vllm"
        why = "vLLM is not installed" if not vllm else "no GPU is visible (nvidia-smi)"
        return "sim", f"engine auto: {why}, so using the built-in simulated engine (sim)"
    if name not in engine_names():
        raise SpecError(
            f"unknown engine {engine!r}; known: auto, {', '.join(engine_names())}",
            field="engine",
        )
    return name, f"engine {name} (as asked)"


def _gpu_visible() -> bool:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return False
    try:
        listed = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def external_budget(
    request: SweepRequest, baseline: Baseline, url: str, api_key: str | None
) -> int:
    """The budget of the server a sweep measures with ``--url``: the one it says it runs
    (``--baseline auto`` or ``none``), or the one the user gives (``--baseline N``), never a list
    of candidates: nothing is launched, so every replay would run the server's own budget and be
    labelled with another. Raises SpecError naming ``budgets`` or ``baseline``, EngineError
    when the server cannot be reached."""
    from budgettune.engines.external import ask_server_budget

    if request.budgets is not None:
        raise SpecError(
            "not with --url: a server you run has one budget, the one it was started with, so "
            "budgettune measures that one",
            field="budgets",
            hint="to compare budgets let budgettune launch the engine (--engine vllm); to "
            "state the server's budget give --baseline N",
        )
    if baseline.tokens is not None:
        return baseline.tokens
    told = ask_server_budget(url, api_key)
    if told is None:
        raise SpecError(
            f"the server at {url} does not say which budget it runs; give it: --baseline "
            "N (its --max-num-batched-tokens)",
            field="baseline",
            hint="vLLM tells it at /server_info when started with VLLM_SERVER_DEV_MODE=1",
        )
    return told


def config_keys_for(engine: str) -> ConfigFileKeys:
    """How ``engine`` (resolved: vllm, sglang, sim, ...) reads ``--engine-config``; SpecError
    (field ``engine_config``) for an engine that takes no config file."""
    from budgettune.engines.registry import config_file_keys

    keys = config_file_keys(engine)
    if keys is None:
        raise SpecError(
            f"reads vLLM's or SGLang's config file (--config), not {engine}'s; pass its "
            "settings with --engine-arg",
            field="engine_config",
        )
    return keys


def file_prefix_caching(config: EngineConfigFile, keys: ConfigFileKeys) -> tuple[bool | None, str]:
    """What the file says of the prefix cache, as the engine reads it: (on, the key in words),
    or (None, "") when it says nothing the engine acts on. vLLM reads ``enable-prefix-caching:
    false`` as ``--no-enable-prefix-caching``; SGLang leaves ``disable-radix-cache: false`` out."""
    if keys.prefix_off is not None and config.value(keys.prefix_off) is True:
        return False, f"{config.spelled[keys.prefix_off]}: true"
    if keys.prefix_on is not None and config.value(keys.prefix_on) is True:
        return True, f"{config.spelled[keys.prefix_on]}: true"
    if keys.false_negates and keys.prefix_on is not None and config.value(keys.prefix_on) is False:
        return False, f"{config.spelled[keys.prefix_on]}: false"
    return None, ""


def check_budgets_hold_seqs(
    engine: str, budgets: Sequence[int], max_num_seqs: int | None, *, field: str
) -> None:
    """Refuse a budget the engine refuses beside the max-num-seqs the user gave (None: not
    given, the engine sizes it), quoting the engine's rule (SpecError naming ``field``)."""
    from budgettune.engines.registry import budget_seqs_rule

    rule = budget_seqs_rule(engine)
    if rule is None or max_num_seqs is None:
        return
    for budget in budgets:
        why = rule(budget, max_num_seqs)
        if why is not None:
            raise SpecError(
                f"{budget} is below --max-num-seqs {max_num_seqs}: {why}; give a budget of at "
                f"least {max_num_seqs} or a smaller --max-num-seqs",
                field=field,
            )


def budgets_taken(
    engine: str, budgets: Sequence[int], max_num_seqs: int | None, align: int
) -> tuple[int, ...]:
    """The searched ``budgets`` the engine takes beside the max-num-seqs the user gave: those
    below it are left out (the engine would refuse them), and when that leaves none, the first
    multiple of ``align`` at or above it."""
    from budgettune.engines.registry import budget_seqs_rule
    from budgettune.tune.candidates import round_up

    rule = budget_seqs_rule(engine)
    if rule is None or max_num_seqs is None:
        return tuple(budgets)
    kept = tuple(budget for budget in budgets if rule(budget, max_num_seqs) is None)
    return kept or (round_up(max_num_seqs, align),)


def refused_pairs(
    engine: str, budgets: Sequence[int], seqs_values: Sequence[int]
) -> frozenset[tuple[int, int]]:
    """The (budget index, max-num-seqs index) pairs of a two-knob grid the engine refuses."""
    from budgettune.engines.registry import budget_seqs_rule

    rule = budget_seqs_rule(engine)
    if rule is None:
        return frozenset()
    return frozenset(
        (i, j)
        for i, budget in enumerate(budgets)
        for j, seqs in enumerate(seqs_values)
        if rule(budget, seqs) is not None
    )


def known_shape(model: str | None) -> ModelShape | None:
    """The model's shape when budgettune can read it here (a preset, a config.json or a model
    folder); None for a model id only the engine resolves."""
    if model is None:
        return None
    try:
        return resolve_model(model)
    except SpecError:
        return None
