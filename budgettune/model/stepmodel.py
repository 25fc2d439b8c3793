"""The roofline step-time model of BRIEF section 3: how long one engine iteration takes.

An iteration holds prompt chunks (n tokens starting at offset o) and decodes (one token at context
c). Its GPU time is a roofline of FLOPs over F against bytes over B: ``max(FLOPs / F, bytes / B)``
(overlapped), or the serialized variant where decode attention's KV reads run after the matrix
multiplies. Under tensor parallelism the GPUs pool F and B, and the all-reduces between them add
after the roofline: a fixed part per iteration and a part per token
(:mod:`budgettune.model.allreduce`). So does, in the measured calibration, the GPU work no split
shortens, which every GPU does whole: a floor per layer (kernel launches and their tails, which
the roofline of one small iteration does not see; more of it with a prompt chunk, whose
attention kernel has a floor of its own) and the layers' norms and residual adds over
each token's activations. Beside it, CPU time: a fixed ``t0`` per iteration plus a
part per sequence in the batch (scheduling, input preparation, sampling).

Two accountings (:mod:`budgettune.model.calibration` names them):

- the textbook roofline's: every parameter costs 2 FLOPs per token and every weight is read once per
  iteration, with one bandwidth for weights and KV cache and a hard ``max``;
- the engine's (vLLM V1): the embedding is a lookup (no FLOPs, no full read); the LM head
  computes logits for one position per scheduled sequence, partial prefills included
  (``logits_indices = query_start_loc[1:] - 1`` in ``vllm/v1/worker/gpu_model_runner.py``,
  vLLM 0.32); the KV cache streams at its own achievable bandwidth; and the turn from
  memory- to compute-bound is soft, ``(c^p + m^p)^(1/p)`` for a fitted sharpness p, as measured
  GPU curves bend (AIConfigurator's H100 prefill curve for Llama-3.1-8B, issue 15).

Everything is linear in a handful of aggregates, so the hot path (:meth:`StepModel.step_time_s`)
takes those aggregates directly, with the coefficients folded once at construction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from budgettune.core.hardware import GPU, ModelShape, check_split
from budgettune.core.limits import MAX_GPUS, check_count, check_number

if TYPE_CHECKING:
    from budgettune.model.calibration import Calibration

MODES = ("overlapped", "serialized")
# Activation elements per token and layer that the fused add-and-RMSNorm kernels move, twice a
# layer: read the residual and the input, write both back (4 x 2); 16-bit, like the all-reduces.
UNSPLIT_ELEMENTS_PER_LAYER = 8
ACCOUNTINGS = ("engine", "seed")


@dataclass(frozen=True, slots=True)
class StepModel:
    """Parameters of the roofline model; all figures achievable (peak x efficiency), SI units.

    The fields after ``overhead_per_seq_s`` are the engine accounting and the measured
    calibrations' figures; left at their defaults the model is the seed's: ``token_params`` =
    ``params``, no LM-head term, ``streamed_weight_bytes`` = ``weight_bytes``,
    ``kv_bytes_per_s`` = ``bytes_per_s`` and a hard max (sharpness infinite).
    """

    params: float  # N, parameters
    weight_bytes: float  # w N, bytes of all weights (what the GPU holds)
    kv_bytes_per_token: float  # kappa
    attention_flops_per_pair: float  # 4 x layers x hidden
    flops_per_s: float  # F, achievable
    bytes_per_s: float  # B, achievable weight streaming
    overhead_s: float = 0.5e-3  # t0, CPU time per iteration
    mode: str = "overlapped"
    # CPU time per sequence in the batch (scheduling, input preparation, sampling): 0 unless a
    # calibration or a profile sets it (vLLM on a CPU fits ~0.4 ms a sequence).
    overhead_per_seq_s: float = 0.0
    token_params: float | None = None  # parameters multiplied per token (seed: all of N)
    head_params: float = 0.0  # LM-head parameters, multiplied per sampled position
    streamed_weight_bytes: float | None = None  # weights read per iteration (seed: all)
    kv_bytes_per_s: float | None = None  # achievable KV-cache streaming (seed: bytes_per_s)
    sharpness: float = math.inf  # p of the soft roofline; inf: the hard max
    # Tensor parallelism's all-reduces: every call's latency, and each token's share (0 on one
    # GPU, and in a profile fitted on the engine, whose figures hold them already).
    comm_fixed_s: float = 0.0
    comm_per_token_s: float = 0.0
    # GPU work every GPU of a split does whole (the measured calibration's per-layer floor, and
    # the norms' activation traffic per token): 0 in the seed and in a profile fitted on the
    # engine, whose t0 holds it.
    unsplit_fixed_s: float = 0.0
    unsplit_prefill_s: float = 0.0  # more of it in an iteration holding a prompt chunk
    unsplit_per_token_s: float = 0.0
    # Folded coefficients of the hot path (set in __post_init__).
    _per_token_s: float = field(init=False, repr=False, compare=False)
    _per_seq_flops_s: float = field(init=False, repr=False, compare=False)
    _per_pair_s: float = field(init=False, repr=False, compare=False)
    _weights_s: float = field(init=False, repr=False, compare=False)
    _kv_token_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not self.sharpness > 0:
            raise ValueError(f"sharpness must be positive, got {self.sharpness!r}")
        set_ = object.__setattr__
        if self.kv_bytes_per_s == self.bytes_per_s:
            set_(self, "kv_bytes_per_s", None)  # one spelling of "the weights' bandwidth"
        set_(self, "_per_token_s", 2.0 * self.per_token_params / self.flops_per_s)
        set_(self, "_per_seq_flops_s", 2.0 * self.head_params / self.flops_per_s)
        set_(self, "_per_pair_s", self.attention_flops_per_pair / self.flops_per_s)
        set_(self, "_weights_s", self.read_weight_bytes / self.bytes_per_s)
        set_(self, "_kv_token_s", self.kv_bytes_per_token / self.kv_streaming_bytes_per_s)

    @property
    def per_token_params(self) -> float:
        """Parameters whose 2 FLOPs every token pays (the seed: all of N)."""
        return self.params if self.token_params is None else self.token_params

    @property
    def read_weight_bytes(self) -> float:
        """Weight bytes read from memory every iteration (the seed: all of them)."""
        streamed = self.streamed_weight_bytes
        return self.weight_bytes if streamed is None else streamed

    @property
    def kv_streaming_bytes_per_s(self) -> float:
        """Achievable bandwidth of KV-cache reads (the seed: the weights' bandwidth)."""
        return self.bytes_per_s if self.kv_bytes_per_s is None else self.kv_bytes_per_s

    @classmethod
    def of_shape(
        cls,
        model: ModelShape,
        *,
        accounting: str,
        flops_per_s: float,
        bytes_per_s: float,
        kv_bytes_per_s: float | None = None,
        sharpness: float = math.inf,
        overhead_s: float = 0.5e-3,
        overhead_per_seq_s: float = 0.0,
        mode: str = "overlapped",
        bytes_per_weight: float = 2,
        kv_bytes_per_element: float | None = None,
    ) -> StepModel:
        """The model of ``model``'s shape with achievable figures given, in one of the two
        accountings (``engine`` or ``seed``). The one place a shape's parameters are split
        into what every token multiplies, what the LM head multiplies and what is read."""
        if accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}")
        kv_elem = bytes_per_weight if kv_bytes_per_element is None else kv_bytes_per_element
        params = float(model.params)
        common = dict(
            params=params,
            weight_bytes=params * bytes_per_weight,
            kv_bytes_per_token=model.kv_bytes_per_token(kv_elem),
            attention_flops_per_pair=4.0 * model.layers * model.hidden,
            flops_per_s=flops_per_s,
            bytes_per_s=bytes_per_s,
            overhead_s=overhead_s,
            mode=mode,
            overhead_per_seq_s=overhead_per_seq_s,
            kv_bytes_per_s=kv_bytes_per_s,
            sharpness=sharpness,
        )
        if accounting == "seed":
            return cls(**common)  # type: ignore[arg-type]
        head = float(model.vocab * model.hidden)
        # An untied embedding is looked up row by row; a tied one is the LM head's matrix,
        # read once for the logits.
        lookup = 0.0 if model.tied_embeddings else head
        return cls(
            **common,  # type: ignore[arg-type]
            token_params=params - lookup - head,
            head_params=head,
            streamed_weight_bytes=(params - lookup) * bytes_per_weight,
        )

    @classmethod
    def from_hardware(
        cls,
        model: ModelShape,
        gpu: GPU,
        *,
        calibration: Calibration | str = "measured",
        bytes_per_weight: float = 2,
        kv_bytes_per_element: float | None = None,
        tensor_parallel: int = 1,
    ) -> StepModel:
        """Build the model from presets and a calibration (a :class:`Calibration`, or its name:
        ``measured``, the per-GPU fit, or ``seed``); ``tensor_parallel`` GPUs pool compute and
        bandwidth, and all-reduce every layer's activations over their link. Raises SpecError
        for an unknown calibration name, or naming the option of a GPU count or weight size out
        of range."""
        from budgettune.model.allreduce import ACTIVATION_BYTES, allreduce_for, comm_coefficients
        from budgettune.model.calibration import calibration_for

        check_count(tensor_parallel, field="tensor_parallel", maximum=MAX_GPUS)
        check_split(model, tensor_parallel, field="tensor_parallel")
        check_number(bytes_per_weight, field="dtype", maximum=64)

        cal = calibration
        if isinstance(cal, str):
            cal = calibration_for(cal, gpu.name)
        bandwidth = gpu.bandwidth_bytes_per_s * tensor_parallel
        allreduce = allreduce_for(gpu, tensor_parallel)
        comm_fixed_s, comm_per_token_s = comm_coefficients(allreduce, model.layers, model.hidden)
        # The norms' traffic runs on one GPU's bandwidth: every GPU of a split does it whole.
        unsplit_bytes_per_token = (
            model.layers * UNSPLIT_ELEMENTS_PER_LAYER * model.hidden * ACTIVATION_BYTES
        )
        one_gpu_bytes_per_s = gpu.bandwidth_bytes_per_s * cal.weight_bandwidth_efficiency
        pooled = cls.of_shape(
            model,
            accounting=cal.accounting,
            flops_per_s=gpu.peak_flops * cal.compute_efficiency * tensor_parallel,
            bytes_per_s=bandwidth * cal.weight_bandwidth_efficiency,
            kv_bytes_per_s=bandwidth * cal.kv_bandwidth_efficiency,
            sharpness=cal.sharpness,
            overhead_s=cal.overhead_s,
            overhead_per_seq_s=cal.overhead_per_seq_s,
            mode=cal.mode,
            bytes_per_weight=bytes_per_weight,
            kv_bytes_per_element=kv_bytes_per_element,
        )
        unsplit = cal.layer_floor_s > 0 or cal.prefill_layer_floor_s > 0
        if allreduce is None and not unsplit:
            return pooled
        return replace(
            pooled,
            comm_fixed_s=comm_fixed_s,
            comm_per_token_s=comm_per_token_s,
            unsplit_fixed_s=model.layers * cal.layer_floor_s,
            unsplit_prefill_s=model.layers * cal.prefill_layer_floor_s,
            unsplit_per_token_s=unsplit_bytes_per_token / one_gpu_bytes_per_s if unsplit else 0.0,
        )

    @property
    def accounting(self) -> str:
        """``seed`` when every parameter counts per token, else ``engine``."""
        return "seed" if self.token_params is None else "engine"

    @property
    def ridge_tokens(self) -> float:
        """P*: prompt tokens of one sequence where compute time equals the weight-read time.

        The seed: FLOPs per token are 2N and the weights are w N bytes, so P* = (F / 2N) /
        (B / wN), for 16-bit weights the brief's F / B. The engine accounting solves
        (2 N_tokens P + 2 N_head) / F = streamed bytes / B.
        """
        return (self._weights_s - self._per_seq_flops_s) / self._per_token_s

    def step_time_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_prefix_tokens: float,
        decodes: float,
        decode_context_tokens: float,
        prefill_chunks: float = 1.0,
    ) -> float:
        """Time of one iteration from its aggregates (the simulator's hot path).

        prefill_tokens: sum of chunk sizes n; prefill_pairs: sum of n*o + n^2/2 over chunks;
        prefill_prefix_tokens: sum of offsets o (cached tokens each chunk re-reads);
        decodes: number of decode tokens; decode_context_tokens: sum of their contexts c;
        prefill_chunks: prompt chunks in the iteration (sequences beside the decodes; only
        counted when prefill_tokens > 0).
        """
        if prefill_tokens <= 0 and decodes <= 0:
            return 0.0
        compute, memory, after = self.roofline_terms_s(
            prefill_tokens,
            prefill_pairs,
            prefill_prefix_tokens,
            decodes,
            decode_context_tokens,
            prefill_chunks,
        )
        p = self.sharpness
        if p == math.inf:
            roof = compute if compute > memory else memory
        else:
            roof = (compute**p + memory**p) ** (1.0 / p)
        seqs = decodes + prefill_chunks if prefill_tokens > 0 else decodes
        tokens = prefill_tokens + decodes
        serial = (
            self.comm_fixed_s
            + self.unsplit_fixed_s
            + (self.unsplit_prefill_s if prefill_tokens > 0 else 0.0)
            + (self.comm_per_token_s + self.unsplit_per_token_s) * tokens
        )
        return self.overhead_s + self.overhead_per_seq_s * seqs + roof + after + serial

    def comm_time_s(self, prefill_tokens: float, decodes: float) -> float:
        """The all-reduces' part of an iteration of ``prefill_tokens`` and ``decodes`` (0 on one
        GPU): what :meth:`step_time_s` adds after the roofline."""
        if prefill_tokens <= 0 and decodes <= 0:
            return 0.0
        return self.comm_fixed_s + self.comm_per_token_s * (prefill_tokens + decodes)

    def roofline_terms_s(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_prefix_tokens: float,
        decodes: float,
        decode_context_tokens: float,
        prefill_chunks: float = 1.0,
    ) -> tuple[float, float, float]:
        """(compute, memory, after): the roofline joins the first two (max, or the soft
        roofline); ``after`` is the decodes' KV read, which the serialized variant adds once the
        matmuls are done (the overlapped one counts it in ``memory``)."""
        seqs = decodes + prefill_chunks if prefill_tokens > 0 else decodes
        compute = (
            self._per_token_s * (prefill_tokens + decodes)
            + self._per_seq_flops_s * seqs
            + self._per_pair_s * (prefill_pairs + decode_context_tokens)
        )
        kv_s = self._kv_token_s
        memory = self._weights_s + kv_s * prefill_prefix_tokens
        decode_kv = kv_s * decode_context_tokens
        if self.mode == "serialized":
            return compute, memory, decode_kv
        return compute, memory + decode_kv, 0.0

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
        """Whether the FLOPs term wins the roofline for this iteration: compute time at least
        the memory time it is compared with (weights and every KV read when overlapped;
        weights and the prompt chunks' prefixes when serialized). Token count alone cannot
        tell: long decode contexts make an iteration above the ridge memory-bound."""
        return self.compute_bound_of(*_aggregates(chunks, decode_contexts))

    def compute_bound_of(
        self,
        prefill_tokens: float,
        prefill_pairs: float,
        prefill_prefix_tokens: float,
        decodes: float,
        decode_context_tokens: float,
        prefill_chunks: float = 1.0,
    ) -> bool:
        """:meth:`compute_bound` from an iteration's aggregates (as :meth:`step_time_s`)."""
        compute_s, memory_s, _ = self.roofline_terms_s(
            prefill_tokens,
            prefill_pairs,
            prefill_prefix_tokens,
            decodes,
            decode_context_tokens,
            prefill_chunks,
        )
        return compute_s >= memory_s


def _aggregates(
    chunks: Iterable[tuple[int, int]], decode_contexts: Iterable[int]
) -> tuple[float, float, float, int, float, int]:
    """(prompt tokens, attention pairs, cached prefixes, decodes, decode contexts, chunks) of
    chunks ``(n, offset)`` and decode contexts, as :meth:`StepModel.step_time_s` takes them."""
    tokens = pairs = prefixes = 0.0
    count = 0
    for n, offset in chunks:
        tokens += n
        pairs += n * offset + n * n / 2.0
        prefixes += offset
        count += 1
    contexts = list(decode_contexts)
    return tokens, pairs, prefixes, len(contexts), float(sum(contexts)), count
