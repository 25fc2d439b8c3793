"""`--engine torch`: time the three iteration series on the model itself, built with transformers
from its config (random weights: the values do not change the timing), with no server.

An iteration is one forward pass over the flattened tokens, as engines run it: the prompt chunk
and one token per decode share every matrix multiply; attention is computed per sequence by a
small varlen attention function registered with transformers (prompt: causal over itself;
decode: over its own resident KV context). torch is imported lazily (``budgettune[torch]``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from budgettune.core import jsonio
from budgettune.core.errors import SpecError, UserError
from budgettune.core.hardware import ModelShape
from budgettune.model.profile import EngineInfo, Hardware, Probe, cpu_model, detect_hardware
from budgettune.profiling.plan import ProbeSpec

ATTENTION_NAME = "budgettune_varlen"
_TORCH_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
                 "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}  # fmt: skip
WARMUP_PASSES = 2
TORCH_CPU_KV_BYTES = 2 * 2**30


def import_torch() -> tuple[Any, Any]:
    """(torch, transformers), or a UserError that names the extra to install."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise UserError(
            f"torch needs PyTorch and transformers ({exc.name} is missing)",
            field="engine",
            hint="pip install 'budgettune[torch]'",
        ) from None
    return torch, transformers


def model_config(source: str, shape: ModelShape) -> dict[str, Any]:
    """The transformers config dict: the local config.json when ``source`` is one (or a folder
    holding one), else a Llama config written from the preset shape."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            config: dict[str, Any] = jsonio.read_json(path, "model config")
        except UserError as error:
            raise SpecError(error.message, field="model") from None
        if not isinstance(config, dict) or "model_type" not in config:
            raise SpecError(f"{path}: missing field 'model_type'", field="model")
        return config
    return {
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
        "max_position_embeddings": shape.max_position_embeddings or 131072,
        "tie_word_embeddings": shape.tied_embeddings,
        "attention_bias": shape.attention_bias,
    }


def resolve_device(torch: Any, device: str) -> str:
    """ "auto" -> "cuda" when a GPU is visible, else "cpu"; anything else is checked."""
    key = device.strip().lower()
    if key == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if key.startswith("cuda") and not torch.cuda.is_available():
        raise SpecError(f"{device!r} asked for but torch sees no CUDA GPU", field="device")
    if key != "cpu" and not key.startswith("cuda"):
        raise SpecError(f"expected auto, cpu or cuda[:N], got {device!r}", field="device")
    return key


def resolve_dtype(dtype: str, device: str) -> str:
    """ "auto" -> bfloat16 on a GPU, float32 on a CPU (where 16-bit matmuls are often slower)."""
    key = dtype.strip().lower()
    if key == "auto":
        return "float32" if device == "cpu" else "bfloat16"
    if key not in _TORCH_DTYPES:
        raise SpecError(
            f"{dtype!r} is not one torch can run here; use one of "
            f"auto, {', '.join(sorted(set(_TORCH_DTYPES)))}",
            field="dtype",
        )
    return _TORCH_DTYPES[key]


class _IterationLayout:
    """What the varlen attention needs to know about the current iteration (set per probe)."""

    __slots__ = ("context", "prompt_tokens")

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.context: dict[int, tuple[Any, Any]] = {}  # layer -> (K, V), each (b, kv_heads, L+1, d)


def _varlen_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **_: Any,
) -> tuple[Any, None]:
    """Attention of one flattened iteration: query/key/value are (1, heads, P + b, d)."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    layout: _IterationLayout = module.budgettune_layout
    p = layout.prompt_tokens
    outputs = []
    if p:
        outputs.append(
            sdpa(
                query[:, :, :p],
                key[:, :, :p],
                value[:, :, :p],
                is_causal=True,
                scale=scaling,
                enable_gqa=True,
            )
        )
    b = query.shape[2] - p
    if b:
        ctx_k, ctx_v = layout.context[module.layer_idx]
        # The new token's K and V take the last slot of each decode's resident context.
        ctx_k[:, :, -1] = key[0, :, p:].transpose(0, 1)
        ctx_v[:, :, -1] = value[0, :, p:].transpose(0, 1)
        kv_heads = ctx_k.shape[1]
        # Pack the query heads of each KV head as query rows (as HF's pack_gqa): no K/V copies.
        q = query[0, :, p:].transpose(0, 1).reshape(b, kv_heads, -1, query.shape[-1])
        out = sdpa(q, ctx_k, ctx_v, scale=scaling)  # (b, kv_heads, groups, d)
        outputs.append(out.reshape(b, -1, query.shape[-1]).transpose(0, 1).unsqueeze(0))
    attn = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)
    return attn.transpose(1, 2).contiguous(), None


def _transformers_config(transformers: Any, source: str, shape: ModelShape) -> tuple[str, Any]:
    """The model's type and its transformers config (random weights are built from it), from
    its config.json; SpecError naming the model when transformers cannot build it."""
    config_dict = model_config(source, shape)
    model_type = config_dict.pop("model_type")
    for key in ("architectures", "torch_dtype", "dtype"):
        config_dict.pop(key, None)
    try:
        return model_type, transformers.AutoConfig.for_model(model_type, **config_dict)
    except (ValueError, TypeError) as exc:
        raise SpecError(f"transformers cannot build this config: {exc}", field="model") from None


class TorchTimer:
    """Times iterations of the model on this machine (an :class:`IterationTimer`).

    threads: CPU threads for torch (None leaves torch's default). Raises UserError when torch is
    missing, SpecError for a bad device, dtype, thread count or config.
    """

    request_overhead_series: tuple[str, ...] = ()

    def __init__(
        self, source: str, shape: ModelShape, *, device: str = "auto", dtype: str = "auto",
        seed: int = 0, gpu_name: str = "auto", threads: int | None = None,
    ) -> None:  # fmt: skip
        torch, transformers = import_torch()
        self._torch = torch
        if threads is not None:
            if threads < 1:
                raise SpecError(f"must be at least 1, got {threads}", field="threads")
            # One thread is steadier on a shared CPU: OpenMP threads of a forward pass wait on
            # each other, so one descheduled thread stalls the whole pass.
            torch.set_num_threads(threads)
        self.device = resolve_device(torch, device)
        if not self.device.startswith("cuda") and gpu_name.strip().lower() != "auto":
            # The profile records the hardware that ran it: a CPU run is not a GPU's.
            raise SpecError(
                f"{gpu_name!r} names a GPU, but torch runs on the CPU here (device {device!r})",
                field="gpu_name",
                hint="leave the GPU at auto for a CPU profile, or run on device cuda",
            )
        self.dtype = resolve_dtype(dtype, self.device)
        transformers.AttentionInterface.register(ATTENTION_NAME, _varlen_attention)
        model_type, config = _transformers_config(transformers, source, shape)
        self.vocab = int(config.vocab_size)
        self.max_positions = int(getattr(config, "max_position_embeddings", 0) or 0)
        torch.manual_seed(seed)
        self._generator = torch.Generator(device="cpu").manual_seed(seed)
        with torch.device(self.device):
            self.model = transformers.AutoModelForCausalLM.from_config(
                config, dtype=getattr(torch, self.dtype), attn_implementation=ATTENTION_NAME
            )
        self.model.eval()
        self.layout = _IterationLayout()
        self._attention_modules = [
            m for m in self.model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj")
        ]
        if not self._attention_modules:
            raise SpecError(
                f"model type {model_type!r} has no attention layers this path knows "
                "(expected Llama-style q_proj/k_proj/v_proj)",
                field="model",
            )
        for module in self._attention_modules:
            module.budgettune_layout = self.layout
        self.kv_heads = int(
            getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        )
        self.head_dim = int(
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        )
        self._cuda = self.device.startswith("cuda")
        # The decode contexts a probe allocates, K and V of every layer: at most half the free
        # GPU memory, or TORCH_CPU_KV_BYTES on a CPU.
        kv_bytes = 2 * len(self._attention_modules) * self.kv_heads * self.head_dim
        kv_bytes *= torch.finfo(getattr(torch, self.dtype)).bits // 8
        budget = torch.cuda.mem_get_info()[0] // 2 if self._cuda else TORCH_CPU_KV_BYTES
        self.kv_capacity_tokens: int | None = int(budget // kv_bytes)
        if self._cuda:
            self.hardware = detect_hardware(gpu_name)
        else:
            self.hardware = Hardware("cpu", cpu_model(), count=1)
        self.engine = EngineInfo(
            name="torch",
            version=str(torch.__version__),
            settings={
                "device": self.device,
                "dtype": self.dtype,
                "transformers": str(transformers.__version__),
                "attention": "varlen sdpa (flattened iteration)",
                "threads": int(torch.get_num_threads()),
                "timer": "cuda events" if self._cuda else "time.perf_counter",
            },
        )

    def _prepare(self, spec: ProbeSpec) -> tuple[Any, Any, int]:
        torch = self._torch
        p, b, ctx = spec.prompt_tokens, spec.batch, spec.context_tokens
        self.layout.prompt_tokens = p
        self.layout.context = {}
        dtype = getattr(torch, self.dtype)
        if b:
            shape = (b, self.kv_heads, ctx + 1, self.head_dim)
            for module in self._attention_modules:
                # Values do not matter for timing; empty memory would do, but NaNs could slow CPUs.
                self.layout.context[module.layer_idx] = (
                    torch.zeros(shape, dtype=dtype, device=self.device),
                    torch.zeros(shape, dtype=dtype, device=self.device),
                )
        ids = torch.randint(0, self.vocab, (1, p + b), generator=self._generator).to(self.device)
        positions = (
            torch.cat([torch.arange(p), torch.full((b,), ctx, dtype=torch.long)])
            .unsqueeze(0)
            .to(self.device)
        )
        # Logits only where engines sample: the prompt's last token and each decode.
        keep = b + (1 if p else 0)
        return ids, positions, keep

    def _forward(self, ids: Any, positions: Any, keep: int) -> None:
        self.model(input_ids=ids, position_ids=positions, use_cache=False, logits_to_keep=keep)

    def warm_up(self, spec: ProbeSpec) -> None:
        """A few untimed passes at the series' first shape (kernels, allocator, caches)."""
        self.time_probe(spec, WARMUP_PASSES)

    def time_probe(self, spec: ProbeSpec, repeats: int) -> Probe:
        """``repeats`` timed forward passes of one iteration shape, seconds each."""
        torch = self._torch
        ids, positions, keep = self._prepare(spec)
        times = []
        try:
            with torch.inference_mode():
                for _ in range(repeats):
                    if self._cuda:
                        start = torch.cuda.Event(enable_timing=True)
                        end = torch.cuda.Event(enable_timing=True)
                        start.record()
                        self._forward(ids, positions, keep)
                        end.record()
                        end.synchronize()
                        times.append(start.elapsed_time(end) / 1e3)
                    else:
                        began = time.perf_counter()
                        self._forward(ids, positions, keep)
                        times.append(time.perf_counter() - began)
        finally:
            self.layout.context = {}
        return Probe(
            spec.series, spec.prompt_tokens, spec.batch, spec.context_tokens, tuple(times), spec.tag
        )

    def close(self) -> None:
        """Free the model (and GPU memory) now rather than at garbage collection."""
        self.model = None
        if self._cuda:
            self._torch.cuda.empty_cache()
