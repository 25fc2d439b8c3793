"""The pass-through guard: engine args that would set what budgettune manages are refused in
one line, in every spelling the engine's parser would read as a managed flag."""

from __future__ import annotations

import pytest

from budgettune.core.errors import UserError
from budgettune.engines.base import LaunchSpec
from budgettune.engines.served import passthrough_flag
from budgettune.engines.sglang import sglang_command
from budgettune.engines.vllm import vllm_command


def refused(command: object, *args: str) -> str:
    spec = LaunchSpec(model="/m", extra_args=args)
    with pytest.raises(UserError) as caught:
        command(spec, 1)  # type: ignore[operator]
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (("--max_num_batched_tokens", "8192"),
         "--max_num_batched_tokens (= --max-num-batched-tokens)"),
        (("--max_num_batched_tokens=8192",),
         "--max_num_batched_tokens (= --max-num-batched-tokens)"),
        (("--max-num_seqs=8",), "--max-num_seqs (= --max-num-seqs)"),
        (("--enable_prefix_caching",), "--enable_prefix_caching (= --enable-prefix-caching)"),
        (("--no_enable_chunked_prefill",),
         "--no_enable_chunked_prefill (= --no-enable-chunked-prefill)"),
        (("--tensor_parallel_size", "2"), "--tensor_parallel_size (= --tensor-parallel-size)"),
        (("--max-num-batched", "8192"), "--max-num-batched (= --max-num-batched-tokens)"),
        (("--gpu-memory-util=0.5",), "--gpu-memory-util (= --gpu-memory-utilization)"),
        (("-tp=2",), "-tp"),
        (("--device-memory-utilization", "0.5"), "--device-memory-utilization"),
    ],
)  # fmt: skip
def test_vllm_refuses_underscores_equals_and_abbreviations(
    args: tuple[str, ...], shown: str
) -> None:
    message = refused(vllm_command, "--enforce-eager", *args)
    assert message.startswith(f"engine_arg: {shown} is set by budgettune for vllm (")
    assert message.endswith("; remove it")


@pytest.mark.parametrize(
    ("args", "shown", "option"),
    [
        (("--tensor-parallel-size", "2"), "--tensor-parallel-size", "--tensor-parallel-size"),
        (("--tp-size=2",), "--tp-size", "--tensor-parallel-size"),
        (("--tp", "2"), "--tp", "--tensor-parallel-size"),
        (("--model", "/other"), "--model", "--model"),
        (("--chunked_prefill_size", "512"), "--chunked_prefill_size (= --chunked-prefill-size)",
         "--budget"),
        (("--chunked-prefill", "512"), "--chunked-prefill (= --chunked-prefill-size)", "--budget"),
        (("--mem-fraction=0.8",), "--mem-fraction (= --mem-fraction-static)",
         "--gpu-memory-utilization"),
        (("--max_running_requests", "8"), "--max_running_requests (= --max-running-requests)",
         "--max-num-seqs"),
    ],
)  # fmt: skip
def test_sglang_refuses_aliases(args: tuple[str, ...], shown: str, option: str) -> None:
    message = refused(sglang_command, *args)
    assert message == f"engine_arg: {shown} is set by budgettune for sglang ({option}); remove it"


@pytest.mark.parametrize("command", [vllm_command, sglang_command])
@pytest.mark.parametrize("arg", ["--config", "--config=serve.yaml"])
def test_config_file_refused(command: object, arg: str) -> None:
    message = refused(command, arg, "serve.yaml")
    assert message.startswith(f"engine_arg: {arg.split('=')[0]} is refused for ")
    assert "a config file can set flags budgettune manages" in message


@pytest.mark.parametrize(
    "args",
    [
        ("--enforce-eager",),
        ("--compilation-config.level", "3"),
        ("--max-logprobs", "-1"),
        ("--served-model-name", "m", "--seed=0", "-O3"),
        ("--kv-cache-dtype", "fp8", "--swap-space", "4"),
    ],
)
def test_vllm_passes_other_flags(args: tuple[str, ...]) -> None:
    assert vllm_command(LaunchSpec(model="/m", extra_args=args), 1)[-len(args) :] == list(args)


def test_sglang_passes_other_flags() -> None:
    args = ("--schedule-policy", "lpm", "--enable-mixed-chunk",
            "--enable-metrics-for-all-schedulers", "--model-impl", "transformers")  # fmt: skip
    assert sglang_command(LaunchSpec(model="/m", extra_args=args), 1)[-len(args) :] == list(args)


def test_flag_spelling_as_the_parser_reads_it() -> None:
    assert passthrough_flag("--max_num_seqs=4") == "--max-num-seqs"
    assert passthrough_flag("--json_arg.some_key") == "--json-arg"
    assert passthrough_flag("-tp") == "-tp"
    for value in ("4", "-1", "-0.5", "-", "--", "a_b"):
        assert passthrough_flag(value) is None


@pytest.mark.parametrize(
    ("command", "args", "shown"),
    [
        (vllm_command, ("--pipeline-parallel-size", "2"), "--pipeline-parallel-size"),
        (vllm_command, ("-pp=4",), "-pp"),
        (vllm_command, ("--pipeline_parallel_size", "2"), "--pipeline_parallel_size"),
        (vllm_command, ("--pipeline-parallel", "2"), "--pipeline-parallel"),  # argparse expands
        (sglang_command, ("--pp-size", "2"), "--pp-size"),
        (sglang_command, ("--pipeline-parallel-size=2",), "--pipeline-parallel-size"),
    ],
)  # fmt: skip
def test_pipeline_parallelism_is_refused_as_not_modelled(
    command: object, args: tuple[str, ...], shown: str
) -> None:
    message = refused(command, *args)
    assert message.startswith(f"engine_arg: {shown} is refused for ")
    assert "pipeline parallelism is not modelled" in message
    assert "--tensor-parallel-size" in message  # what to do instead


def test_one_pipeline_stage_is_what_budgettune_models() -> None:
    # a size of 1 is the engines' default: passed through, nothing refused
    spec = LaunchSpec(model="/m", extra_args=("--pipeline-parallel-size", "1", "-pp=1"))
    words = vllm_command(spec, 1)
    start = words.index("--pipeline-parallel-size")
    assert words[start : start + 3] == ["--pipeline-parallel-size", "1", "-pp=1"]
    sglang = sglang_command(LaunchSpec(model="/m", extra_args=("--pp-size", "1")), 1)
    assert sglang[-2:] == ["--pp-size", "1"]
