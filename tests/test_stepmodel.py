"""The roofline step-time model against hand-computed iterations (BRIEF section 3): the seed
accounting (every parameter per token, one bandwidth, a hard max) and the engine accounting of
the measured calibrations (LM head per sampled sequence, no embedding FLOPs, the KV cache's own
bandwidth, the soft knee)."""

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
    h100 = StepModel.from_hardware(
        resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm"), calibration="seed"
    )
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


# The engine accounting on round numbers: N = 1e9 of which 1e8 embedding and 1e8 LM head
# (untied); every token pays 2 x 8e8 FLOPs, each sequence 2 x 1e8 for its one logits row; the
# iteration reads (N - embedding) x 2 = 1.8e9 bytes of weights at B = 1e12 (1.8 ms) and the KV
# cache at 5e11 B/s.
ENGINE = dict(
    ROUND,
    token_params=8e8,
    head_params=1e8,
    streamed_weight_bytes=1.8e9,
    kv_bytes_per_s=5e11,
)


def test_engine_accounting_charges_the_lm_head_per_sequence_not_per_token() -> None:
    model = StepModel(**ENGINE)
    # 1000 prompt tokens: FLOPs 2*8e8*1000 + 2*1e8*1 + 1e6*500,000 = 2.1002e12 (21.002 ms)
    assert model.iteration_time_s([(1000, 0)]) == pytest.approx(1e-3 + 21.002e-3)
    # the same tokens as two chunks of two sequences: one more logits row (2e8 FLOPs, 2 us)
    pairs = 2 * 500**2 / 2
    two = model.step_time_s(1000, pairs, 0, 0, 0, prefill_chunks=2)
    one = model.step_time_s(1000, pairs, 0, 0, 0, prefill_chunks=1)
    assert two - one == pytest.approx(2e-6)
    assert model.accounting == "engine" and StepModel(**ROUND).accounting == "seed"


@pytest.mark.parametrize("mode", ["overlapped", "serialized"])
def test_engine_accounting_reads_the_kv_cache_at_its_own_bandwidth(mode: str) -> None:
    model = StepModel(**ENGINE, mode=mode)
    # 4 decodes at context 1000: weights 1.8 ms; KV 1e5 * 4000 / 5e11 = 0.8 ms;
    # FLOPs 2*8e8*4 + 2*1e8*4 + 1e6*4000 = 1.12e10 (0.112 ms): memory-bound either way.
    assert model.iteration_time_s([], [1000] * 4) == pytest.approx(1e-3 + 2.6e-3)


def test_soft_knee_bends_the_roofline_where_compute_meets_memory() -> None:
    hard = StepModel(**ENGINE)
    soft = StepModel(**ENGINE, sharpness=2.0)
    # P* where 2*8e8*P + 2e8 = 1.8e9 FLOP-equivalents at F/B = 100: (1.8e11 - 2e8) / 1.6e9
    assert hard.ridge_tokens == pytest.approx((1.8e-3 - 2e-6) / 1.6e-5)
    assert soft.ridge_tokens == hard.ridge_tokens  # the knee's place is the roofline's
    # 112 tokens: FLOPs 2*8e8*112 + 2e8 + 1e6*112^2/2 = 1.85672e11 (1.85672 ms) against the
    # 1.8 ms weight read: the hard max takes 1.857 ms, p = 2 sqrt(1.85672^2 + 1.8^2) = 2.586 ms
    p = 112
    assert hard.iteration_time_s([(p, 0)]) == pytest.approx(1e-3 + 1.85672e-3)
    assert soft.iteration_time_s([(p, 0)]) == pytest.approx(
        1e-3 + (1.85672e-3**2 + 1.8e-3**2) ** 0.5
    )
    # far from the knee both agree to a few percent
    assert soft.iteration_time_s([(20_000, 0)]) == pytest.approx(
        hard.iteration_time_s([(20_000, 0)]), rel=0.01
    )


def test_per_sequence_cpu_time_counts_every_sequence() -> None:
    model = StepModel(**ROUND, overhead_per_seq_s=1e-4)
    base = StepModel(**ROUND)
    # a prompt chunk and 3 decodes are 4 sequences to schedule and sample
    chunks, contexts = [(500, 0)], [100, 200, 300]
    assert model.iteration_time_s(chunks, contexts) == pytest.approx(
        base.iteration_time_s(chunks, contexts) + 4e-4
    )


def test_presets_in_both_calibrations() -> None:
    shape, gpu = resolve_model("llama-3.1-8b"), resolve_gpu("h100-sxm")
    seed = StepModel.from_hardware(shape, gpu, calibration="seed")
    measured = StepModel.from_hardware(shape, gpu)
    head = shape.vocab * shape.hidden
    assert seed.per_token_params == shape.params and seed.head_params == 0
    assert measured.per_token_params == shape.params - 2 * head  # embedding and LM head apart
    assert measured.head_params == head
    assert measured.read_weight_bytes == (shape.params - head) * 2  # the embedding is a lookup
    assert measured.weight_bytes == seed.weight_bytes == shape.params * 2  # what memory holds
    assert measured.mode in ("overlapped", "serialized") and measured.sharpness < 10
