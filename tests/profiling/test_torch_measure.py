"""`--engine torch` on the CPU: the varlen attention is exact, and the tiny Llama's three series
are measured and fitted."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from budgettune.app.profile import ProfileConfig, run_profile
from budgettune.core.errors import SpecError, UserError
from budgettune.core.hardware import resolve_model
from budgettune.model.profile import load_profile
from budgettune.profiling.plan import ProbeSpec

torch = pytest.importorskip("torch")  # the optional extra; CI installs it


def _reference_attention(q, k, v, ctx_k, ctx_v, p: int):
    """Per-sequence attention with K/V repeated to every query head, the plain way."""
    heads, kv_heads = q.shape[1], k.shape[1]
    groups = heads // kv_heads
    out = []
    if p:
        kr = k[:, :, :p].repeat_interleave(groups, dim=1)
        vr = v[:, :, :p].repeat_interleave(groups, dim=1)
        scores = q[:, :, :p] @ kr.transpose(-1, -2) / math.sqrt(q.shape[-1])
        mask = torch.triu(torch.ones(p, p, dtype=torch.bool), diagonal=1)
        out.append(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ vr)
    for j in range(q.shape[2] - p):
        keys = torch.cat([ctx_k[j, :, :-1], k[0, :, p + j : p + j + 1]], dim=1)
        values = torch.cat([ctx_v[j, :, :-1], v[0, :, p + j : p + j + 1]], dim=1)
        keys = keys.repeat_interleave(groups, dim=0)
        values = values.repeat_interleave(groups, dim=0)
        qj = q[0, :, p + j : p + j + 1]  # (heads, 1, d)
        weights = torch.softmax(qj @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        out.append((weights @ values).unsqueeze(0))
    return torch.cat(out, dim=2).transpose(1, 2)


@pytest.mark.parametrize(("p", "b"), [(7, 0), (0, 3), (5, 4)])
def test_varlen_attention_matches_per_sequence_attention(p: int, b: int) -> None:
    from budgettune.profiling.torch_measure import _IterationLayout, _varlen_attention

    gen = torch.Generator().manual_seed(1)
    heads, kv_heads, d, ctx = 4, 2, 8, 6
    q = torch.randn(1, heads, p + b, d, generator=gen)
    k = torch.randn(1, kv_heads, p + b, d, generator=gen)
    v = torch.randn(1, kv_heads, p + b, d, generator=gen)
    ctx_k = torch.randn(b, kv_heads, ctx + 1, d, generator=gen)
    ctx_v = torch.randn(b, kv_heads, ctx + 1, d, generator=gen)
    layout = _IterationLayout()
    layout.prompt_tokens = p
    layout.context = {0: (ctx_k.clone(), ctx_v.clone())}
    module = SimpleNamespace(budgettune_layout=layout, layer_idx=0)
    got, _ = _varlen_attention(module, q, k, v, None, scaling=1 / math.sqrt(d))
    expected = _reference_attention(q, k, v, ctx_k, ctx_v, p)
    assert got.shape == (1, p + b, heads, d)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_prompt_logits_equal_transformers_sdpa(tiny_config: Path) -> None:
    """A prompt-only iteration through the varlen path computes what the stock model does."""
    import transformers

    from budgettune.profiling.torch_measure import TorchTimer

    timer = TorchTimer(str(tiny_config), resolve_model(str(tiny_config)), device="cpu", threads=1)
    reference = transformers.AutoModelForCausalLM.from_config(
        timer.model.config, attn_implementation="sdpa", dtype=torch.float32
    )
    reference.load_state_dict(timer.model.state_dict())
    ids = torch.randint(0, 4096, (1, 33), generator=torch.Generator().manual_seed(2))
    timer.layout.prompt_tokens = 33
    with torch.inference_mode():
        ours = timer.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
        theirs = reference(input_ids=ids, use_cache=False, logits_to_keep=1).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_timer_times_every_series_shape(tiny_config: Path) -> None:
    from budgettune.profiling.torch_measure import TorchTimer

    timer = TorchTimer(str(tiny_config), resolve_model(str(tiny_config)), device="cpu", threads=1)
    assert timer.engine.name == "torch" and timer.engine.settings["dtype"] == "float32"
    assert timer.hardware.kind == "cpu"
    for spec in (
        ProbeSpec("prefill", 64),
        ProbeSpec("decode", 0, 4, 128),
        ProbeSpec("mixed", 64, 4, 128),
    ):
        timer.warm_up(spec)
        probe = timer.time_probe(spec, 3)
        assert (probe.series, probe.prompt_tokens, probe.batch) == (
            spec.series,
            spec.prompt_tokens,
            spec.batch,
        )
        assert len(probe.times_s) == 3 and all(t > 0 for t in probe.times_s)
    small = min(timer.time_probe(ProbeSpec("prefill", 64), 3).times_s)
    large = min(timer.time_probe(ProbeSpec("prefill", 2048), 3).times_s)
    assert large > 4 * small  # 32x the tokens: far more than noise


def test_profile_torch_tiny_model_on_cpu(tiny_config: Path, tmp_path: Path) -> None:
    config = ProfileConfig(
        model=str(tiny_config),
        engine="torch",
        max_tokens=1024,
        max_batch=16,
        contexts=(128, 512),
        repeats=3,
        threads=1,
        device="cpu",
        typical_batch=8,
        typical_context=256,
        output=tmp_path / "tiny.json",
        bootstrap=50,
    )
    seen: list[tuple[str, int, int]] = []
    outcome = run_profile(config, progress=lambda s, done, total: seen.append((s, done, total)))
    profile = outcome.profile
    assert profile.complete and profile.kind == "measured"
    assert {p.series for p in profile.probes} == {"prefill", "decode", "mixed"}
    assert all(p.times_s and min(p.times_s) > 0 for p in profile.probes)
    assert [s for s, _, _ in seen if s] and seen[-1][1] == seen[-1][2] == len(profile.probes)
    assert profile.engine.version == torch.__version__
    assert profile.model.bytes_per_weight == 4  # float32 on a CPU
    step = profile.step
    assert step is not None and set(step.errors) == {"prefill", "decode", "mixed"}
    assert step.flops_per_s > 0 and step.bytes_per_s > 0
    assert profile.ridge is not None and profile.ridge.reason
    assert outcome.summary is not None
    assert load_profile(tmp_path / "tiny.json") == profile
    with (tmp_path / "tiny.csv").open() as handle:
        assert {row["source"] for row in csv.DictReader(handle)} == {"measured"}
    # every probe's passes were timed inside the run's clock (no wall-time bound: the machine's
    # speed moves; benchmarks/bench_profile_time.py measures how long profiling takes)
    assert sum(sum(probe.times_s) for probe in profile.probes) <= profile.elapsed_s


def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from budgettune.profiling.torch_measure import import_torch

    monkeypatch.setitem(sys.modules, "torch", None)  # what an environment without torch sees
    with pytest.raises(UserError) as info:
        import_torch()
    assert info.value.field == "engine" and "torch needs PyTorch" in info.value.message
    assert info.value.hint is not None and "budgettune[torch]" in info.value.hint


def test_bad_device_and_dtype(tiny_config: Path) -> None:
    from budgettune.profiling.torch_measure import TorchTimer, resolve_dtype

    shape = resolve_model(str(tiny_config))
    with pytest.raises(SpecError, match=r"^device: expected auto, cpu or cuda"):
        TorchTimer(str(tiny_config), shape, device="tpu")
    with pytest.raises(
        SpecError, match=r"^gpu_name: 'h100-sxm' names a GPU, but torch runs on the CPU"
    ):
        TorchTimer(str(tiny_config), shape, device="cpu", gpu_name="h100-sxm")
    with pytest.raises(SpecError, match=r"^dtype: 'float64x' is not one torch can run"):
        resolve_dtype("float64x", "cpu")
    assert resolve_dtype("auto", "cuda") == "bfloat16"
    assert resolve_dtype("bf16", "cpu") == "bfloat16"
