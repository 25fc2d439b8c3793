"""The roofline step-time model against hand-computed iterations (BRIEF section 3)."""

from __future__ import annotations

import pytest

from budgettune.core.hardware import resolve_gpu, resolve_model
from budgettune.model.chunking import chunked_prefill
from budgettune.model.stepmodel import StepModel

# Round numbers so every expectation below is arithmetic on paper:
# N = 1e9 params, 2 bytes each; kappa = 1e5 B/token; 1e6 FLOPs per attention pair;
# F = 1e14 FLOP/s, B = 1e12 B/s, t0 = 1 ms.
ROUND = dict(
    params=1e9,
    weight_bytes=2e9,
    kv_bytes_per_token=1e5,
    attention_flops_per_pair=1e6,
    flops_per_s=1e14,
    bytes_per_s=1e12,
    overhead_s=1e-3,
)


@pytest.mark.parametrize("mode", ["overlapped", "serialized"])
def test_decode_only_iteration_is_memory_bound(mode: str) -> None:
    model = StepModel(**ROUND, mode=mode)
    # 4 decodes at context 1000: FLOPs 2e9*4 + 1e6*4000 = 1.2e10 (0.12 ms);
    # bytes 2e9 + 1e5*4000 = 2.4e9 (2.4 ms) -> 1 + 2.4 ms either way.
    assert model.iteration_time_s([], [1000] * 4) == pytest.approx(3.4e-3)


@pytest.mark.parametrize("mode", ["overlapped", "serialized"])
def test_prefill_only_iteration_is_compute_bound(mode: str) -> None:
    model = StepModel(**ROUND, mode=mode)
    # 1000 tokens at offset 0: FLOPs 2e9*1000 + 1e6*(1000^2/2) = 2.5e12 (25 ms); bytes 2 ms.
    assert model.iteration_time_s([(1000, 0)]) == pytest.approx(26e-3)


def test_mixed_iteration_both_variants() -> None:
    # chunk 500 at offset 1000, 10 decodes at context 2000:
    # pairs 500*1000 + 500^2/2 + 10*2000 = 645,000; FLOPs 2e9*510 + 6.45e11 = 1.665e12 (16.65 ms)
    # prefill bytes 2e9 + 1e5*1000 = 2.1e9 (2.1 ms); decode KV 1e5*20,000 = 2e9 (2 ms)
    overlapped = StepModel(**ROUND, mode="overlapped")
    serialized = StepModel(**ROUND, mode="serialized")
    chunks, contexts = [(500, 1000)], [2000] * 10
    assert overlapped.iteration_time_s(chunks, contexts) == pytest.approx(1e-3 + 16.65e-3)
    assert serialized.iteration_time_s(chunks, contexts) == pytest.approx(1e-3 + 16.65e-3 + 2e-3)


def test_serialized_adds_decode_kv_when_memory_bound() -> None:
    # 1 decode at context 100,000: FLOPs 2e9 + 1e11 (1.02 ms); weights 2 ms; KV 1e10 B (10 ms)
    overlapped = StepModel(**ROUND, mode="overlapped")
    serialized = StepModel(**ROUND, mode="serialized")
    assert overlapped.iteration_time_s([], [100_000]) == pytest.approx(1e-3 + 12e-3)
    assert serialized.iteration_time_s([], [100_000]) == pytest.approx(1e-3 + 2e-3 + 10e-3)


def test_empty_iteration_takes_no_time() -> None:
    assert StepModel(**ROUND).iteration_time_s() == 0.0


def test_ridge_round_numbers_and_h100_preset() -> None:
    assert StepModel(**ROUND).ridge_tokens == pytest.approx(100.0)
    h100 = StepModel.from_hardware(resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"))
    # BRIEF: 60% of 989 TFLOP/s over 80% of 3.35 TB/s is about 221 tokens.
    assert h100.ridge_tokens == pytest.approx(0.6 * 989e12 / (0.8 * 3.35e12), rel=1e-9)
    assert 220 < h100.ridge_tokens < 222


def test_step_time_aggregates_match_chunk_form() -> None:
    model = StepModel(**ROUND, mode="serialized")
    by_chunks = model.iteration_time_s([(300, 0), (200, 700)], [50, 150])
    pairs = 300 * 0 + 300**2 / 2 + 200 * 700 + 200**2 / 2
    assert model.step_time_s(500, pairs, 700, 2, 200) == pytest.approx(by_chunks)


def test_chunking_below_ridge_costs_more() -> None:
    model = StepModel(**ROUND)
    small = chunked_prefill(model, 1000, 50)  # below the 100-token ridge
    large = chunked_prefill(model, 1000, 500)
    assert len(small.step_s) == 20 and len(large.step_s) == 2
    # each 50-token chunk is memory-bound: >= t0 + weight read (3 ms), 20 of them >= 60 ms
    assert small.total_s >= 20 * 3e-3
    assert small.overhead_pct > large.overhead_pct > 0
    # the last chunk of 500 at offset 500: FLOPs 2e9*500 + 1e6*(250,000 + 125,000) = 1.375e12
    assert large.step_s[1] == pytest.approx(1e-3 + 13.75e-3)


def test_compute_bound_compares_the_roofline_terms_not_token_counts() -> None:
    overlapped = StepModel(**ROUND, mode="overlapped")
    serialized = StepModel(**ROUND, mode="serialized")
    assert overlapped.compute_bound([(1000, 0)])  # 25 ms of FLOPs against a 2 ms weight read
    assert not overlapped.compute_bound([], [1000] * 4)  # 0.12 ms against 2.4 ms
    # 301 tokens, three times the 100-token ridge, beside a decode at context 100,000:
    # FLOPs 2e9*301 + 1e6*(300^2/2 + 100,000) = 7.47e11 (7.47 ms); weights 2 ms, KV 10 ms.
    chunks, contexts = [(300, 0)], [100_000]
    assert not overlapped.compute_bound(chunks, contexts)  # 7.47 ms < 2 + 10 ms
    assert serialized.compute_bound(chunks, contexts)  # 7.47 ms > 2 ms; the KV read adds after
    assert serialized.iteration_time_s(chunks, contexts) == pytest.approx(1e-3 + 7.47e-3 + 10e-3)
