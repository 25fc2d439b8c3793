"""The communication term of the step-time model under tensor parallelism.

Split over n GPUs (Megatron's layout, which vLLM and SGLang use), every layer ends its attention
and its MLP with an all-reduce of the layer's activations, tokens x hidden elements, and the
vocabulary-parallel embedding adds one more: 2 x layers + 1 all-reduces per iteration. Nothing
overlaps them with the matrix multiplies, so they add to the iteration's time.

One all-reduce of E elements of b bytes takes a fixed latency plus the ring algorithm's bytes,
2 (n - 1) / n x E x b, over the link's achievable bandwidth. The two figures are fitted, per GPU
and GPU count, to the all-reduce table AIConfigurator's vLLM backend reads (vLLM's custom
all-reduce in CUDA graphs, bfloat16; ``data/aiconfigurator/allreduce/``), by
``scripts/fit_calibrations.py``; the bandwidth is kept as a share of the link's peak
(:data:`budgettune.core.hardware.GPU_LINKS`) so that a GPU without a table of its own takes its
nearest sibling's share on its own link, said so.
"""

from __future__ import annotations

from dataclasses import dataclass

from budgettune.core.hardware import GPU, Link, link_of

ACTIVATION_BYTES = 2  # vLLM all-reduces activations in the model's 16-bit dtype, fp8 weights too
MEASURED_GPU_COUNTS = (2, 4, 8)  # the table's GPU counts: one node's NVLink or PCIe peers
SOURCE = "fitted to NVIDIA AIConfigurator 0.12.0's all-reduce table for vLLM's custom all-reduce"

# ---------------------------------------------------------------------------------------------
# Fitted by scripts/fit_calibrations.py (its output, pasted) to data/aiconfigurator/allreduce/:
# gpu: {gpus: (share of the link's peak bandwidth, latency per all-reduce in microseconds)}.
_FITTED: dict[str, dict[int, tuple[float, float]]] = {
    "a100-80g": {2: (0.533, 5.0), 4: (0.529, 6.3), 8: (0.537, 8.0)},
    "b200": {2: (0.367, 7.9), 4: (0.476, 8.8), 8: (0.581, 11.2)},
    "h100-sxm": {2: (0.527, 4.2), 4: (0.599, 5.2), 8: (0.732, 6.5)},
    "h200": {2: (0.554, 4.4), 4: (0.627, 5.2), 8: (0.785, 6.4)},
    "l40s": {2: (0.598, 5.4), 4: (0.120, 11.4), 8: (0.065, 17.5)},
}
# GPU presets without a table take their nearest sibling's figures (same link kind), said so.
SIBLINGS = {"h100-pcie": "l40s", "a100-40g": "a100-80g", "a6000": "l40s"}
CUSTOM_SIBLING = "h100-sxm"


@dataclass(frozen=True, slots=True)
class AllReduce:
    """One all-reduce over ``gpus`` GPUs: ``latency_s`` per call and ``bytes_per_s``, the
    achievable bandwidth of the ring's bytes; ``source`` says where the figures come from."""

    gpus: int
    link: Link
    latency_s: float
    bytes_per_s: float
    source: str

    @property
    def ring_share(self) -> float:
        """The share of the buffer each GPU sends in a ring all-reduce: 2 (n - 1) / n."""
        return 2.0 * (self.gpus - 1) / self.gpus

    def time_s(self, elements: float, element_bytes: float = ACTIVATION_BYTES) -> float:
        """Time of one all-reduce of ``elements`` values of ``element_bytes`` each."""
        return self.latency_s + self.ring_share * elements * element_bytes / self.bytes_per_s

    def to_json(self) -> dict[str, object]:
        return {
            "gpus": self.gpus,
            "link": self.link.name,
            "link_gbs": self.link.bytes_per_s / 1e9,
            "latency_us": self.latency_s * 1e6,
            "bandwidth_gbs": self.bytes_per_s / 1e9,
            "source": self.source,
        }


def measured_count(gpus: int) -> int:
    """The table's GPU count whose figures serve ``gpus``: the next one up, else the largest."""
    return next((n for n in MEASURED_GPU_COUNTS if n >= gpus), MEASURED_GPU_COUNTS[-1])


def allreduce_for(gpu: GPU, gpus: int) -> AllReduce | None:
    """The all-reduce of ``gpus`` GPUs like ``gpu`` (None for one GPU), from the fitted table;
    its source says when the figures are a sibling's or another GPU count's."""
    if gpus <= 1:
        return None
    sibling = gpu.name if gpu.name in _FITTED else SIBLINGS.get(gpu.name, CUSTOM_SIBLING)
    count = measured_count(gpus)
    share, latency_us = _FITTED[sibling][count]
    link = link_of(gpu)
    source = f"{SOURCE} ({sibling}, {count} GPUs)"
    if sibling != gpu.name:
        source = (
            f"{SOURCE}: {gpu.name} not covered, estimated from its nearest sibling, "
            f"{sibling}'s share of its link, on its own {link.name}"
        )
    if count != gpus:
        source += f"; {gpus} GPUs estimated from {count}"
    return AllReduce(gpus, link, latency_us * 1e-6, share * link.bytes_per_s, source)


def allreduces(layers: int) -> int:
    """All-reduces in one iteration: two per layer (attention, MLP) and the embedding's."""
    return 2 * layers + 1


def comm_coefficients(allreduce: AllReduce | None, layers: int, hidden: int) -> tuple[float, float]:
    """(seconds per iteration, seconds per token) of an iteration's all-reduces: every call's
    latency, and each token's ``hidden`` activations through every call."""
    if allreduce is None:
        return 0.0, 0.0
    calls = allreduces(layers)
    per_token_s = allreduce.time_s(hidden) - allreduce.latency_s
    return calls * allreduce.latency_s, calls * per_token_s


def fitted_allreduce_gpus() -> tuple[str, ...]:
    """The GPU presets with all-reduce figures of their own."""
    return tuple(_FITTED)
