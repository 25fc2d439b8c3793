"""GPU presets and model shapes: the hardware and model numbers the step-time model needs.

A model shape comes from a preset name or a local Hugging Face ``config.json`` (a file or a model
folder); a GPU from a preset name or from explicit peak figures. Nothing here is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from budgettune.core import jsonio
from budgettune.core.errors import SpecError, UserError
from budgettune.core.fields import Fields
from budgettune.core.limits import MAX_TOKENS, check_number

MAX_DIMENSION = 1 << 22  # a config.json's hidden, intermediate or vocabulary size
MAX_LAYERS = 4096


@dataclass(frozen=True, slots=True)
class GPU:
    """Peak datasheet figures of one accelerator (dense bf16/fp16 tensor FLOP/s, no sparsity)."""

    name: str
    peak_flops: float
    bandwidth_bytes_per_s: float
    memory_bytes: float


_TB = 1e12
_GB = 1e9

# Peak dense BF16 tensor-core FLOP/s (no sparsity), HBM/GDDR bandwidth and memory size, from the
# vendors' datasheets:
#   H100 SXM / PCIe: NVIDIA H100 Tensor Core GPU datasheet (2023): 989 / 756 TFLOPS, 3.35 / 2.0 TB/s
#   H200 SXM: NVIDIA H200 datasheet (2024): 989 TFLOPS, 4.8 TB/s, 141 GB
#   A100 80GB SXM / 40GB: NVIDIA A100 datasheet (2021): 312 TFLOPS, 2,039 / 1,555 GB/s
#   L40S: NVIDIA L40S datasheet (2023): 362.05 TFLOPS, 864 GB/s, 48 GB
#   RTX A6000: NVIDIA RTX A6000 datasheet (2021): 154.8 TFLOPS (FP32 accumulate), 768 GB/s, 48 GB
#   B200: NVIDIA HGX B200 datasheet (2024), per GPU: 2.25 PFLOPS dense, 8 TB/s, 180 GB
GPU_PRESETS: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("h100-sxm", 989 * _TB, 3.35 * _TB, 80 * _GB),
        GPU("h100-pcie", 756 * _TB, 2.0 * _TB, 80 * _GB),
        GPU("h200", 989 * _TB, 4.8 * _TB, 141 * _GB),
        GPU("a100-80g", 312 * _TB, 2.039 * _TB, 80 * _GB),
        GPU("a100-40g", 312 * _TB, 1.555 * _TB, 40 * _GB),
        GPU("l40s", 362.05 * _TB, 0.864 * _TB, 48 * _GB),
        GPU("a6000", 154.8 * _TB, 0.768 * _TB, 48 * _GB),
        GPU("b200", 2250 * _TB, 8.0 * _TB, 180 * _GB),
    )
}


@dataclass(frozen=True, slots=True)
class Link:
    """How one GPU reaches its tensor-parallel peers: the link's name and its peak bandwidth per
    GPU in one direction (what an all-reduce's ring sends over)."""

    name: str
    bytes_per_s: float


# Per GPU, one direction, from the same datasheets (NVLink's figures are both directions
# together, halved here): H100 SXM and H200 NVLink 4, 900 GB/s; A100 SXM (80 and 40 GB) NVLink 3,
# 600 GB/s; B200 NVLink 5, 1.8 TB/s. Cards without NVLink reach their peers over PCIe x16:
# Gen 5 64 GB/s (H100 PCIe; its optional NVLink bridge joins only pairs), Gen 4 32 GB/s (L40S,
# RTX A6000). AIConfigurator's system files give the same figures (intra_node_bw).
GPU_LINKS: dict[str, Link] = {
    "h100-sxm": Link("NVLink 4", 450 * _GB),
    "h100-pcie": Link("PCIe Gen 5 x16", 64 * _GB),
    "h200": Link("NVLink 4", 450 * _GB),
    "a100-80g": Link("NVLink 3", 300 * _GB),
    "a100-40g": Link("NVLink 3", 300 * _GB),
    "l40s": Link("PCIe Gen 4 x16", 32 * _GB),
    "a6000": Link("PCIe Gen 4 x16", 32 * _GB),
    "b200": Link("NVLink 5", 900 * _GB),
}
CUSTOM_LINK_OF = "h100-sxm"  # a GPU described by its peaks alone: the H100 SXM's NVLink


def link_of(gpu: GPU) -> Link:
    """The link ``gpu`` reaches its tensor-parallel peers over (a custom GPU: an H100 SXM's)."""
    return GPU_LINKS.get(gpu.name, GPU_LINKS[CUSTOM_LINK_OF])


def resolve_gpu(name: str) -> GPU:
    """Look up a GPU preset by name (case-insensitive). Raises SpecError listing valid names."""
    key = name.strip().lower()
    if key not in GPU_PRESETS:
        raise SpecError(
            f"unknown GPU preset {name!r}; known: {', '.join(GPU_PRESETS)}",
            field="gpu",
            hint="or describe it with --peak-tflops, --bandwidth-tbs and --memory-gb",
        )
    return GPU_PRESETS[key]


@dataclass(frozen=True, slots=True)
class HardwareFacts:
    """What a run knew about its hardware and model, for results.json's ``hardware``: the GPU's
    peak figures, the model's name and parameter count (None: a hub name only the engine
    resolves) and, where the step-time model was built, its ridge."""

    gpu: GPU | None = None
    model: str | None = None
    params: float | None = None  # as counted: an int from a shape, a float from a model
    ridge_tokens: float | None = None

    def to_json(self) -> dict[str, object]:
        """Only the facts known, in units a reader expects (TFLOP/s, TB/s, GB)."""
        doc: dict[str, object] = {}
        if self.gpu is not None:
            doc.update(
                gpu=self.gpu.name,
                peak_tflops=self.gpu.peak_flops / 1e12,
                bandwidth_tbs=self.gpu.bandwidth_bytes_per_s / 1e12,
                memory_gb=self.gpu.memory_bytes / 1e9,
            )
        if self.model is not None:
            doc["model"] = self.model
        if self.params is not None:
            doc["params"] = self.params
        if self.ridge_tokens is not None:
            doc["ridge_tokens"] = self.ridge_tokens
        return doc


def check_model_len(shape: ModelShape, max_model_len: int | None) -> None:
    """Refuse a ``max_model_len`` past the model's own context (its max_position_embeddings),
    as vLLM does: positions past it were never trained."""
    own = shape.max_position_embeddings
    if max_model_len is not None and own is not None and max_model_len > own:
        raise SpecError(
            f"{max_model_len:,} tokens is more than {shape.name} takes (its "
            f"max_position_embeddings, {own:,})",
            field="max_model_len",
        )


def check_split(shape: ModelShape, tensor_parallel: int, *, field: str) -> None:
    """Refuse a tensor-parallel size that does not divide the model's attention heads, as the
    engines do (vLLM's ModelConfig.verify_with_parallel_config, vllm/config/model.py, 0.32, in
    its own words; SGLang and TensorRT-LLM split heads the same way)."""
    if tensor_parallel > 1 and shape.heads % tensor_parallel:
        raise SpecError(
            f"{tensor_parallel} GPUs cannot split {shape.name}: 'Total number of attention heads "
            f"({shape.heads}) must be divisible by tensor parallel size ({tensor_parallel}).' "
            "(vLLM)",
            field=field,
        )


# A custom GPU's figures: finite, at least the first (below it no figure the model gives means
# anything: 1 GFLOP/s, 1 GB/s, and 1 GB, less than the weights of any model preset), and at most
# the second (a thousand B200s' worth).
CUSTOM_GPU_LIMITS = {
    "peak_tflops": (1e-3, 1e7, "TFLOP/s"),
    "bandwidth_tbs": (1e-3, 1e4, "TB/s"),
    "memory_gb": (1.0, 1e6, "GB"),
}


def custom_gpu(peak_tflops: float, bandwidth_tbs: float, memory_gb: float) -> GPU:
    """A GPU from explicit figures (TFLOP/s, TB/s, GB); each positive, finite and at most
    :data:`CUSTOM_GPU_LIMITS`. Raises SpecError naming the figure."""
    for field, value in (
        ("peak_tflops", peak_tflops),
        ("bandwidth_tbs", bandwidth_tbs),
        ("memory_gb", memory_gb),
    ):
        low, high, unit = CUSTOM_GPU_LIMITS[field]
        check_number(
            value, field=field, minimum=low, inclusive_minimum=True, maximum=high, what=unit
        )
    return GPU("custom", peak_tflops * _TB, bandwidth_tbs * _TB, memory_gb * _GB)


DTYPE_BYTES: dict[str, float] = {
    "float32": 4,
    "fp32": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": 0.5,
}


def dtype_bytes(dtype: str) -> float:
    """Bytes per element of a dtype name ("bfloat16" -> 2). Raises SpecError for unknown names."""
    key = dtype.strip().lower()
    if key not in DTYPE_BYTES:
        raise SpecError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}", field="dtype")
    return DTYPE_BYTES[key]


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The architecture numbers of a decoder-only transformer (Llama family layout)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool = False
    attention_bias: bool = False
    max_position_embeddings: int | None = None

    @property
    def params(self) -> int:
        """Parameter count N: embeddings, attention, gated MLP, norms, LM head (unless tied)."""
        q_dim = self.heads * self.head_dim
        kv_dim = self.kv_heads * self.head_dim
        attention = self.hidden * (q_dim + 2 * kv_dim) + q_dim * self.hidden
        if self.attention_bias:
            attention += q_dim + 2 * kv_dim
        mlp = 3 * self.hidden * self.intermediate  # gate, up, down
        norms = 2 * self.hidden
        per_layer = attention + mlp + norms
        embeddings = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * per_layer + embeddings + self.hidden  # + final norm

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """KV-cache bytes one token occupies: 2 (K and V) x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element


# Shapes from each model's published config.json on the Hugging Face Hub (Qwen3-32B's also ships
# in AIConfigurator's model_configs, the second shape the measured calibrations are fitted to).
MODEL_PRESETS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape(
            "llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, max_position_embeddings=131072
        ),
        ModelShape(
            "llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, max_position_embeddings=131072
        ),
        ModelShape("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, max_position_embeddings=32768),
        ModelShape(
            "qwen2.5-7b",
            28,
            3584,
            28,
            4,
            128,
            18944,
            152064,
            attention_bias=True,
            max_position_embeddings=32768,
        ),
        ModelShape("yi-34b", 60, 7168, 56, 8, 128, 20480, 64000, max_position_embeddings=4096),
        ModelShape(
            "llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, max_position_embeddings=4096
        ),
        ModelShape("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, max_position_embeddings=40960),
    )
}


def resolve_model(name_or_path: str) -> ModelShape:
    """A preset name, a ``config.json`` file or a folder holding one. Raises SpecError otherwise."""
    key = name_or_path.strip().lower()
    if key in MODEL_PRESETS:
        return MODEL_PRESETS[key]
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return load_model_shape(path)
    raise SpecError(
        f"{name_or_path!r} is neither a preset nor a config.json or model folder; "
        f"presets: {', '.join(MODEL_PRESETS)}",
        field="model",
    )


def load_model_shape(config_path: Path) -> ModelShape:
    """Read a Hugging Face ``config.json``; names the missing field when one is absent."""
    try:
        config = jsonio.read_json(config_path, "model config")
    except UserError as error:
        raise SpecError(error.message, field="model", hint=error.hint) from None
    if not isinstance(config, dict):
        raise SpecError(f"{config_path}: not a model config (not a JSON object)", field="model")
    if isinstance(config.get("text_config"), dict):  # multimodal wrappers keep the LM inside
        config = {**config, **config["text_config"]}
    fields = Fields(config, str(config_path))

    def need(*keys: str, maximum: int = MAX_DIMENSION) -> int:
        for key in keys:
            if config.get(key) is not None:
                try:
                    return fields.integer(key, minimum=1, maximum=maximum)
                except UserError as error:
                    raise SpecError(error.message, field="model") from None
        raise SpecError(f"{config_path}: missing field {keys[0]!r}", field="model")

    def optional(key: str, maximum: int = MAX_DIMENSION) -> int | None:
        return need(key, maximum=maximum) if config.get(key) is not None else None

    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head")
    kv_heads = optional("num_key_value_heads") or heads
    head_dim = optional("head_dim") or max(1, hidden // heads)
    name = str(config.get("_name_or_path") or config_path.parent.name or "model")
    return ModelShape(
        name=name,
        layers=need("num_hidden_layers", "n_layer", maximum=MAX_LAYERS),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=need("intermediate_size", "n_inner"),
        vocab=need("vocab_size"),
        tied_embeddings=bool(config.get("tie_word_embeddings", False)),
        attention_bias=bool(config.get("attention_bias", False))
        or config.get("model_type") in {"qwen2"},
        max_position_embeddings=optional("max_position_embeddings", maximum=MAX_TOKENS),
    )
