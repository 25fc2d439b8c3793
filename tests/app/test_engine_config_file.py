"""--engine-config: the user's `vllm serve --config` file checked once (a key budgettune sets, or
one also given as a flag, refused by name), its modelled settings taken in as if given, passed
whole to every vLLM launch, and written back as vllm.yaml with only the answer set."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from budgettune.app.engine_config_file import with_engine_config
from budgettune.app.launch import launch_spec
from budgettune.app.requests import LaunchRequest, TrafficRequest
from budgettune.artifacts.engine_config import FixedSettings, write_engine_config
from budgettune.core.errors import UserError
from budgettune.engines.facts import decided_by
from budgettune.engines.vllm import vllm_command

PROD = "# production settings, reviewed 2026-11\nswap-space: 4\nseed: 7\n"


@dataclass(frozen=True)
class _Req:
    """The two groups with_engine_config reads (a sweep's or a replay's request has more)."""

    launch: LaunchRequest
    traffic: TrafficRequest = field(default_factory=TrafficRequest)


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prod.yaml"
    path.write_text(text)
    return path


@pytest.fixture()
def prod(tmp_path: Path) -> Path:
    return _file(tmp_path, PROD)


def _spec(path: Path, engine: str = "vllm", **launch: object):  # type: ignore[no-untyped-def]
    return launch_spec(
        LaunchRequest(engine_config=path, **launch),  # type: ignore[arg-type]
        engine=engine, model="/models/m" if engine != "sim" else None, gpu=None, url=None,
        max_model_len_tokens=None,
    )  # fmt: skip


def test_every_launch_passes_the_file_and_the_config_is_it_plus_the_budget(
    prod: Path, tmp_path: Path
) -> None:
    spec = _spec(prod)
    command = vllm_command(spec, 8000)
    assert command[command.index("--config") + 1] == str(prod.resolve())
    out = tmp_path / "run"
    out.mkdir()
    written = write_engine_config(
        out, engine="vllm", budget_tokens=2048, fixed=FixedSettings(base_config_text=PROD)
    )
    assert written.read_text() == PROD + "max-num-batched-tokens: 2048\n"  # byte for byte


def test_a_key_the_file_holds_changes_in_place_in_its_own_spelling(tmp_path: Path) -> None:
    base = "# ours\nmax_num_seqs: 8   # tuned last quarter\ndtype: float16\n"
    out = tmp_path / "run"
    out.mkdir()
    same = write_engine_config(out, engine="vllm", budget_tokens=512,
                               fixed=FixedSettings(max_num_seqs=8, dtype="float16",
                                                   base_config_text=base))  # fmt: skip
    assert same.read_text() == base + "max-num-batched-tokens: 512\n"
    fixed = FixedSettings(max_num_seqs=16, base_config_text=base)
    changed = write_engine_config(out, engine="vllm", budget_tokens=512, fixed=fixed)
    assert changed.read_text() == (
        "# ours\nmax_num_seqs: 16  # tuned last quarter\ndtype: float16\n"  # comment column kept
        "max-num-batched-tokens: 512\n"
    )


@pytest.mark.parametrize(
    ("text", "launch", "said"),
    [
        ("max-num-batched-tokens: 8192\n", {}, "'max-num-batched-tokens' is set by budgettune"),
        (
            "max_num_batched_tokens: 8192\n",
            {},
            "use --budgets (sweep) or --budget (replay) instead",
        ),
        ("no-enable-chunked-prefill: true\n", {}, "use --budgets none"),
        ("port: 9000\n", {}, "'port' is set by budgettune"),
        (
            "max_num_seqs: 8\n",
            {"max_num_seqs": "16"},
            "'max_num_seqs' is also given as --max-num-seqs 16",
        ),
        ("dtype: float16\n", {"dtype": "float32"}, "also given as --dtype float32"),
        ("swap-space: 4\n", {"engine_arg": ("--swap-space 8",)}, "also given as --engine-arg"),
        (
            "no-enable-prefix-caching: true\n",
            {"prefix_caching": "on"},
            "also given as --prefix-caching on",
        ),
        ("- a\n- b\n", {}, "expected a mapping of flag names to values, got list"),
        ("seed: [\n", {}, "not YAML"),
        ("seed: 1\nseed_x: 2\nseed: 3\n", {}, "not YAML"),  # a duplicate key
        ("max-num-seqs: 8\nmax_num_seqs: 9\n", {}, "set the same flag --max-num-seqs"),
        ("max-num-seqs: many\n", {}, "'max-num-seqs' must be a whole number"),
    ],
)
def test_refused_in_one_line_naming_the_key(
    tmp_path: Path, text: str, launch: dict[str, object], said: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(UserError) as caught:
        with_engine_config(_Req(LaunchRequest(engine_config=path, **launch)))  # type: ignore[arg-type]
    assert said in str(caught.value)
    assert caught.value.field == "engine_config"
    assert "\n" not in str(caught.value)


def test_tuned_max_num_seqs_is_the_sweeps(tmp_path: Path) -> None:
    path = _file(tmp_path, "max-num-seqs: 8\n")
    with pytest.raises(UserError, match="tuned with the budget"):
        with_engine_config(_Req(LaunchRequest(engine_config=path)), tunes_seqs=True)


def test_modelled_settings_count_as_given(tmp_path: Path) -> None:
    text = (
        "model: /models/prod\nmax_num_seqs: 24\nmax-model-len: 8192\ndtype: float32\n"
        "tensor-parallel-size: 2\ngpu-memory-utilization: 0.85\n"
    )
    path = _file(tmp_path, text)
    done = with_engine_config(_Req(LaunchRequest(engine_config=path)))
    launch = done.launch
    assert (launch.model, launch.max_num_seqs, launch.dtype) == ("/models/prod", "24", "float32")
    assert (launch.tensor_parallel_size, launch.gpu_memory_utilization) == (2, 0.85)
    assert done.traffic.max_model_len == "8192"


def test_the_files_prefix_caching_decides_under_engine(tmp_path: Path) -> None:
    spec = _spec(_file(tmp_path, "no-enable-prefix-caching: true\n"))
    assert spec.prefix_caching is False
    assert dict(decided_by(spec))["prefix_caching"] == (
        "the user's engine config: no-enable-prefix-caching: true"
    )
    # vLLM 0.32 reads "key: false" as --no-key where that flag exists
    # (FlexibleArgumentParser.load_config_file): this file turns the cache off
    off = _spec(_file(tmp_path, "enable-prefix-caching: false\n"))
    assert off.prefix_caching is False
    assert dict(decided_by(off))["prefix_caching"] == (
        "the user's engine config: enable-prefix-caching: false"
    )
    # SGLang leaves a false store_true flag out: the radix cache stays on
    kept = _spec(_file(tmp_path, "disable-radix-cache: false\n"), engine="sglang")
    assert kept.prefix_caching is True


def test_a_mapping_value_is_the_engines_json(tmp_path: Path) -> None:
    text = "speculative-config:\n  model: eagle3\n  num_speculative_tokens: 3\n"
    spec = _spec(_file(tmp_path, text))  # vLLM passes a mapping on as JSON: it is not refused
    out = tmp_path / "run"
    out.mkdir()
    written = write_engine_config(
        out, engine="vllm", budget_tokens=512, fixed=FixedSettings(base_config_text=text)
    )
    assert written.read_text() == text + "max-num-batched-tokens: 512\n"
    assert spec.engine_config is not None


def test_a_config_file_needs_a_yaml_name_as_vllm_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "prod.conf"
    path.write_text("seed: 7\n")
    with pytest.raises(UserError, match=r"named \*\.yaml or \*\.yml"):
        _spec(path)


def test_engines_without_a_config_file_refuse_it(prod: Path) -> None:
    with pytest.raises(UserError, match="reads vLLM's or SGLang's config file"):
        _spec(prod, engine="trtllm")


SGLANG_PROD = "# SGLang in production\nmodel-path: /models/qwen  # pinned\nschedule-policy: lpm\n"


def test_sglang_reads_its_own_keys_and_passes_the_file(tmp_path: Path) -> None:
    from budgettune.engines.sglang import sglang_command

    path = _file(tmp_path, SGLANG_PROD + "context_length: 4096\ndisable-radix-cache: true\n")
    request = with_engine_config(_Req(LaunchRequest(engine="sglang", engine_config=path)))
    assert request.launch.model == "/models/qwen"  # model-path is SGLang's key for the model
    assert request.traffic.max_model_len == "4096"
    spec = _spec(path, engine="sglang")
    assert (spec.prefix_caching, dict(decided_by(spec))["prefix_caching"]) == (
        False,
        "the user's engine config: disable-radix-cache: true",
    )
    command = sglang_command(spec, 8000)
    # SGLang puts the file's flags ahead of the command line's, so budgettune's flags win
    assert command[command.index("--config") + 1] == str(path.resolve())


@pytest.mark.parametrize(
    ("text", "launch", "message"),
    [
        ("chunked-prefill-size: 512\n", {}, "'chunked-prefill-size' is set by budgettune"),
        ("max-running-requests: 8\n", {"max_num_seqs": "16"}, "also given as --max-num-seqs 16"),
        ("tp: 2\n", {"tensor_parallel_size": 2}, "'tp' is also given as --tensor-parallel-size 2"),
        ("disable-radix-cache: true\n", {"prefix_caching": "on"}, "--prefix-caching on"),
    ],
)
def test_sglang_refuses_a_managed_key_or_one_given_twice(
    tmp_path: Path, text: str, launch: dict[str, object], message: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(UserError, match=message):
        with_engine_config(_Req(LaunchRequest(engine="sglang", engine_config=path, **launch)))  # type: ignore[arg-type]


def test_sglang_wants_a_yaml_name(tmp_path: Path) -> None:
    path = tmp_path / "prod.conf"
    path.write_text("schedule-policy: lpm\n")
    with pytest.raises(UserError, match=r"named \*\.yaml or \*\.yml"):
        with_engine_config(_Req(LaunchRequest(engine="sglang", engine_config=path)))


def test_the_sglang_answer_is_the_users_file_with_the_budget(tmp_path: Path) -> None:
    from budgettune.artifacts.recommendation import write_outputs  # noqa: F401  (files listed)

    out = tmp_path / "run"
    out.mkdir()
    written = write_engine_config(
        out,
        engine="sglang",
        budget_tokens=2048,
        model="/models/qwen",
        fixed=FixedSettings(max_num_seqs=32, base_config_text=SGLANG_PROD),
    )
    assert written.read_text() == "--config sglang.yaml\n"
    assert (out / "sglang.yaml").read_text() == (
        SGLANG_PROD + "chunked-prefill-size: 2048\nmax-running-requests: 32\n"
    )  # the model is the file's own key, kept in place; nothing else touched


def test_the_built_in_engine_reads_the_keys_it_models(tmp_path: Path) -> None:
    from budgettune.engines.embedded.cli import config_from_args

    path = _file(
        tmp_path,
        "# prod\nmax_num_seqs: 7\ngpu-memory-utilization: 0.5\nno-enable-prefix-caching: true\n"
        "enable-chunked-prefill: false\nswap-space: 4\n",
    )
    heard: list[str] = []
    config = config_from_args(["--config", str(path)], heard.append)
    assert (config.max_num_seqs, config.gpu_memory_utilization) == (7, 0.5)
    # "enable-chunked-prefill: false" is --no-enable-chunked-prefill, as vLLM 0.32 reads it
    assert config.prefix_caching is False and config.budget_tokens is None
    assert heard == [f"{path}: the built-in engine does not model swap-space; ignored"]
    flagged = config_from_args(["--config", str(path), "--max-num-seqs", "9"])
    assert flagged.max_num_seqs == 9  # the command line wins, as in vLLM


def test_a_sim_launch_passes_the_file(prod: Path) -> None:
    from budgettune.engines.embedded.engine import SimEngine

    command = SimEngine().command(_spec(prod, engine="sim"), 8000)
    assert command[command.index("--config") + 1] == str(prod.resolve())


def test_pass_through_flags_are_carried_into_the_written_config(tmp_path: Path) -> None:
    from budgettune.engines.config_file import flag_settings

    words = ("--enforce-eager", "--swap-space", "8", "--kv-cache-dtype=fp8", "--seed", "-1",
             "--cuda-graph-sizes", "1", "2", "4")  # fmt: skip
    assert flag_settings(words) == {
        "enforce-eager": True, "swap-space": 8, "kv-cache-dtype": "fp8", "seed": -1,
        "cuda-graph-sizes": [1, 2, 4],
    }  # fmt: skip
    out = tmp_path / "run"
    out.mkdir()
    base = "# prod\nmax-model-len: 4096  # our longest\n"  # a key also passed would be refused
    fixed = FixedSettings(engine_args=words, base_config_text=base)
    written = write_engine_config(out, engine="vllm", budget_tokens=1024, fixed=fixed)
    assert written.read_text() == base + (
        "max-num-batched-tokens: 1024\nenforce-eager: true\nswap-space: 8\n"
        "kv-cache-dtype: fp8\nseed: -1\ncuda-graph-sizes:\n- 1\n- 2\n- 4\n"
    )
    fresh = write_engine_config(out, engine="vllm", budget_tokens=1024,
                                fixed=FixedSettings(engine_args=words))  # fmt: skip
    assert fresh.read_text().endswith("seed: -1\ncuda-graph-sizes: [1, 2, 4]\n")
    plain = write_engine_config(out, engine="sglang", budget_tokens=1024, model="m",
                                fixed=FixedSettings(engine_args=("--device", "cpu")))  # fmt: skip
    assert plain.read_text() == "--model-path m --chunked-prefill-size 1024 --device cpu\n"
    # the built-in engine's flags are its own, not vLLM's: nothing carried
    sim = write_engine_config(out, engine="sim", budget_tokens=512,
                              fixed=FixedSettings(engine_args=("--time-scale", "0.5")))  # fmt: skip
    assert "time-scale" not in sim.read_text()
