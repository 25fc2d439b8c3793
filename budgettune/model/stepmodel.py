"""The roofline step-time model of BRIEF section 3: how long one engine iteration takes.

An iteration holds prompt chunks (n tokens starting at offset o) and decodes (one token at context
c). Time is ``t0 + max(FLOPs / F, bytes / B)`` (overlapped) or the serialized variant, where decode
attention's KV reads run after the matrix multiplies, plus an optional cost per decode sequence
(0 unless a profile fitted one). Everything is linear in a handful of aggregates, so the hot
path (:meth:`StepModel.step_time_s`) takes those aggregates directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from budgettune.core.hardware import GPU, ModelShape

DEFAULT_COMPUTE_EFFICIENCY = 0.6
DEFAULT_BANDWIDTH_EFFICIENCY = 0.8
DEFAULT_OVERHEAD_S = 0.5e-3
MODES = ("overlapped", "serialized")


@dataclass(frozen=True, slots=True)
class StepModel:
    """Parameters of the roofline model; all figures achievable (peak x efficiency), SI units."""

    params: float  # N, parameters
    weight_bytes: float  # w N, bytes of all weights
    kv_bytes_per_token: float  # kappa
    attention_flops_per_pair: float  # 4 x layers x hidden
    flops_per_s: float  # F, achievable
    bytes_per_s: float  # B, achievable
    overhead_s: float = DEFAULT_OVERHEAD_S  # t0
    mode: str = "overlapped"
    # Per decode sequence (sampling, bookkeeping, the CPU's per-sequence attention call): 0 in
    # the roofline; a profile fits it where it shows (vLLM on a CPU, ~0.4 ms a sequence).
    overhead_per_seq_s: float = 0.0

    @classmethod
    def from_hardware(
        cls,
        model: ModelShape,
        gpu: GPU,
        *,
        bytes_per_weight: float = 2,
        kv_bytes_per_element: float | None = None,
        compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY,
        bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY,
        overhead_s: float = DEFAULT_OVERHEAD_S,
        mode: str = "overlapped",
        tensor_parallel: int = 1,
    ) -> StepModel:
        """Build the model from presets; ``tensor_parallel`` GPUs pool compute and bandwidth."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        kv_elem = bytes_per_weight if kv_bytes_per_element is None else kv_bytes_per_element
        return cls(
            params=float(model.params),
            weight_bytes=float(model.params) * bytes_per_weight,
            kv_bytes_per_token=model.kv_bytes_per_token(kv_elem),
            attention_flops_per_pair=4.0 * model.layers * model.hidden,
            flops_per_s=gpu.peak_flops * compute_efficiency * tensor_parallel,
            bytes_per_s=gpu.bandwidth_bytes_per_s * bandwidth_efficiency * tensor_parallel,
            overhead_s=overhead_s,
            mode=mode,
        )

    @property
    def ridge_tokens(self) -> float:
        """P*: tokens per iteration where compute time equals the weight-read time.

        FLOPs per token are 2N and the weights are w N bytes, so P* = (F / 2N) / (B / wN); for
        16-bit weights (w = 2) this is the brief's F / B.
        """
        return (self.flops_per_s / (2.0 * self.params)) * (self.weight_bytes / self.bytes_per_s)

    def step_time_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_prefix_tokens: float,
        decodes: float,
        decode_context_tokens: float,
    ) -> float:
        """Time of one iteration from its aggregates (the simulator's hot path).

        prefill_tokens: sum of chunk sizes n; prefill_pairs: sum of n*o + n^2/2 over chunks;
        prefill_prefix_tokens: sum of offsets o (cached tokens each chunk re-reads);
        decodes: number of decode tokens; decode_context_tokens: sum of their contexts c.
        """
        if prefill_tokens <= 0 and decodes <= 0:
            return 0.0
        compute_s, memory_s, after_s = self._roofline_s(
            prefill_tokens, prefill_pairs, prefill_prefix_tokens, decodes, decode_context_tokens
        )
        fixed_s = self.overhead_s + self.overhead_per_seq_s * decodes
        return fixed_s + max(compute_s, memory_s) + after_s

    def _roofline_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_prefix_tokens: float,
        decodes: float,
        decode_context_tokens: float,
    ) -> tuple[float, float, float]:
        """(compute, memory, after): the roofline takes the max of the first two; ``after`` is
        the decodes' KV read, which the serialized variant adds once the matmuls are done (the
        overlapped one counts it in ``memory``)."""
        flops = 2.0 * self.params * (prefill_tokens + decodes) + self.attention_flops_per_pair * (
            prefill_pairs + decode_context_tokens
        )
        compute_s = flops / self.flops_per_s
        prefill_bytes = self.weight_bytes + self.kv_bytes_per_token * prefill_prefix_tokens
        decode_kv_s = self.kv_bytes_per_token * decode_context_tokens / self.bytes_per_s
        if self.mode == "serialized":
            return compute_s, prefill_bytes / self.bytes_per_s, decode_kv_s
        return compute_s, prefill_bytes / self.bytes_per_s + decode_kv_s, 0.0

    def iteration_time_s(
        self,
        chunks: Iterable[tuple[int, int]] = (),
        decode_contexts: Iterable[int] = (),
    ) -> float:
        """Time of one iteration holding prompt chunks ``(n, offset)`` and decodes at contexts c."""
        return self.step_time_s(*_aggregates(chunks, decode_contexts))

    def compute_bound(
        self,
        chunks: Iterable[tuple[int, int]] = (),
        decode_contexts: Iterable[int] = (),
    ) -> bool:
        """Whether the FLOPs term wins the roofline's max for this iteration: compute time at
        least the memory time it is compared with (weights and every KV read when overlapped;
        weights and the prompt chunks' prefixes when serialized). Token count alone cannot
        tell: long decode contexts make an iteration above the ridge memory-bound."""
        compute_s, memory_s, _ = self._roofline_s(*_aggregates(chunks, decode_contexts))
        return compute_s >= memory_s


def _aggregates(
    chunks: Iterable[tuple[int, int]], decode_contexts: Iterable[int]
) -> tuple[float, float, float, int, float]:
    """(prompt tokens, attention pairs, cached prefixes, decodes, decode contexts) of chunks
    ``(n, offset)`` and decode contexts, as :meth:`StepModel.step_time_s` takes them."""
    tokens = pairs = prefixes = 0.0
    for n, offset in chunks:
        tokens += n
        pairs += n * offset + n * n / 2.0
        prefixes += offset
    contexts = list(decode_contexts)
    return tokens, pairs, prefixes, len(contexts), float(sum(contexts))
