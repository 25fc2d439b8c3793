"""The behaviour table of --prefix-caching: each value (engine, on, off) on each engine,
through the same functions a sweep uses, arriving where it acts: the engine's command line (or
TensorRT-LLM's options file), the launch's facts (who decided, and the engine's own source for
its default), and the written config, which carries the setting only where it is not the
engine's default. The built-in engine's own cache and counters: tests/engines/
test_sim_prefix_cache.py; a sweep end to end: tests/tune/test_sweep_prefix_caching.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from budgettune.app.launch import launch_spec, prefix_caching_setting
from budgettune.app.requests import LaunchRequest
from budgettune.artifacts.engine_config import FixedSettings, write_engine_config
from budgettune.core.errors import SpecError
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.engines.facts import decided_by
from budgettune.engines.sglang import sglang_command
from budgettune.engines.trtllm import options_settings
from budgettune.engines.vllm import vllm_command


@dataclass(frozen=True, slots=True)
class Row:
    """--prefix-caching VALUE on ENGINE: the cache ``on`` or off, what the launch shows (``shows``:
    words on the command line, or TensorRT-LLM's block-reuse setting), who decided (the start of
    the facts' sentence) and the written config's line (None: nothing carried)."""

    engine: str
    value: str
    on: bool
    shows: str
    decided: str
    config_line: str | None


TABLE = (
    Row("vllm", "engine", True, "--enable-prefix-caching",
        "the engine's default, on: vLLM V1 caches prefixes by default", None),
    Row("vllm", "on", True, "--enable-prefix-caching", "the user: --prefix-caching on", None),
    Row("vllm", "off", False, "--no-enable-prefix-caching", "the user: --prefix-caching off",
        "no-enable-prefix-caching: true"),
    Row("sim", "engine", True, "--enable-prefix-caching",
        "the engine's default, on: the built-in engine follows vLLM V1", None),
    Row("sim", "off", False, "--no-enable-prefix-caching", "the user: --prefix-caching off",
        "no-enable-prefix-caching: true"),
    Row("sglang", "engine", True, "", "the engine's default, on: SGLang keeps its radix cache",
        None),
    Row("sglang", "on", True, "", "the user: --prefix-caching on", None),
    Row("sglang", "off", False, "--disable-radix-cache", "the user: --prefix-caching off",
        "--disable-radix-cache"),
    Row("trtllm", "engine", True, "enable_block_reuse=True",
        "the engine's default, on: TensorRT-LLM reuses KV blocks", None),
    Row("trtllm", "off", False, "enable_block_reuse=False", "the user: --prefix-caching off",
        "enable_block_reuse: false"),
)  # fmt: skip


def _shown(engine: str, spec: LaunchSpec) -> list[str]:
    """What the launch passes the engine: its argument list, or the options file's setting."""
    if engine == "vllm":
        return vllm_command(spec, 8000)
    if engine == "sglang":
        return sglang_command(spec, 8000)
    if engine == "sim":
        return SimEngine().command(spec, 8000)
    kv = options_settings(spec)["kv_cache_config"]
    assert isinstance(kv, dict)
    return [f"enable_block_reuse={kv['enable_block_reuse']}"]


@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"{r.engine}-{r.value}")
def test_prefix_caching_row(row: Row, tmp_path: Path) -> None:
    spec = launch_spec(
        LaunchRequest(prefix_caching=row.value), engine=row.engine,
        model=None if row.engine == "sim" else "/models/m", gpu=None, url=None,
        max_model_len_tokens=None,
    )  # fmt: skip
    assert spec.prefix_caching is row.on
    shown = _shown(row.engine, spec)
    if row.shows:
        assert row.shows in shown
    # The flag of the other state is never there (SGLang has no flag for on).
    other = {"--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-radix-cache"}
    assert not (other - {row.shows}) & set(shown)
    assert dict(decided_by(spec))["prefix_caching"].startswith(row.decided)
    fixed = FixedSettings(prefix_caching=prefix_caching_setting(row.engine, spec.prefix_caching))
    written = write_engine_config(tmp_path, engine=row.engine, budget_tokens=512, fixed=fixed)
    text = written.read_text()
    if row.config_line is None:
        assert "prefix" not in text and "radix" not in text and "block_reuse" not in text
    else:
        assert row.config_line in text


@pytest.mark.parametrize("value", ["on", "off"])
def test_a_server_budgettune_does_not_start_refuses_on_and_off(value: str) -> None:
    with pytest.raises(SpecError, match="cannot set its prefix cache") as caught:
        launch_spec(
            LaunchRequest(prefix_caching=value), engine="external", model=None, gpu=None,
            url="http://127.0.0.1:8000", max_model_len_tokens=None,
        )  # fmt: skip
    assert caught.value.field == "prefix_caching"
    spec = launch_spec(
        LaunchRequest(), engine="external", model=None, gpu=None, url="http://127.0.0.1:8000",
        max_model_len_tokens=None,
    )  # fmt: skip
    assert "the server's own setting" in dict(decided_by(spec))["prefix_caching"]


def test_an_unknown_value_names_the_three() -> None:
    with pytest.raises(SpecError, match="use engine, on or off, got 'yes'"):
        launch_spec(
            LaunchRequest(prefix_caching="yes"), engine="vllm", model="m", gpu=None, url=None,
            max_model_len_tokens=None,
        )  # fmt: skip
