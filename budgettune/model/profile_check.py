"""The numbers of a profile document checked before it is built into a Profile: whole,
finite and in range, each error naming the file and the field (``probes[3].batch``)."""

from __future__ import annotations

import math
from typing import Any

from budgettune.core.fields import Fields
from budgettune.core.hardware import MAX_DIMENSION, MAX_LAYERS
from budgettune.core.limits import MAX_SEQS, MAX_TOKENS

_SHAPE_LIMITS = {
    "layers": MAX_LAYERS, "hidden": MAX_DIMENSION, "heads": MAX_DIMENSION,
    "kv_heads": MAX_DIMENSION, "head_dim": MAX_DIMENSION, "intermediate": MAX_DIMENSION,
    "vocab": MAX_DIMENSION,
}  # fmt: skip


# A fitted figure past these is no GPU's: a thousand of the largest custom GPU
# (core/hardware.CUSTOM_GPU_LIMITS: 1e7 TFLOP/s, 1e4 TB/s), a second a token, and a soft
# roofline's p past which it is a hard max in all but rounding.
MAX_FLOPS_PER_S = 1e22
MAX_BYTES_PER_S = 1e19
SECONDS_PER_TOKEN = 1.0
MAX_SHARPNESS = 1000.0


def check_numbers(data: dict[str, Any], source: str) -> None:
    """The numbers the step-time model and the reports compute with: whole, finite and in
    range (UserError naming the field), so a hand-edited profile cannot read ``true`` as 1
    or put ``1e400`` into a prediction. The rest of the document is checked as it is built."""
    top = Fields(data, source)
    model = top.child("model")
    shape = model.child("shape")
    for name, limit in _SHAPE_LIMITS.items():
        shape.integer(name, minimum=1, maximum=limit)
    shape.integer_or_none("max_position_embeddings", minimum=1, maximum=MAX_TOKENS)
    model.number("bytes_per_weight", minimum=0.0625, maximum=64)
    model.number("kv_bytes_per_element", minimum=0.0625, maximum=64)
    for index, item in enumerate(top.items("probes")):
        probe = Fields.of(item, f"{source}: probes[{index}]")
        series = probe.text("series")
        # a prefill or mixed probe times a prompt, a decode or mixed one a batch of decoders
        prompt_least = 1 if series in ("prefill", "mixed") else 0
        batch_least = 1 if series in ("decode", "mixed") else 0
        probe.integer("prompt_tokens", minimum=prompt_least, maximum=MAX_TOKENS)
        probe.integer("batch", minimum=batch_least, maximum=MAX_SEQS)
        probe.integer("context_tokens", minimum=0, maximum=MAX_TOKENS)
        times = probe.items("times_s")
        for position, value in enumerate(times):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value >= 0)
            ):
                probe.fail(f"times_s[{position}]", "a finite time in seconds", value)
    ridge = top.child_or_none("ridge")
    if ridge is not None:
        for name in ("knee_tokens", "ci_low_tokens", "ci_high_tokens"):
            ridge.number_or_none(name, minimum=1.0, maximum=MAX_TOKENS)
        ridge.number("linear_slope_s_per_token", minimum=0.0, maximum=SECONDS_PER_TOKEN)
    step = top.child_or_none("step")
    if step is not None:
        step.number("flops_per_s", minimum=1.0, maximum=MAX_FLOPS_PER_S)
        step.number("bytes_per_s", minimum=1.0, maximum=MAX_BYTES_PER_S)
        step.number_or_none("kv_bytes_per_s", minimum=1.0, maximum=MAX_BYTES_PER_S)
        step.number_or_none("sharpness", minimum=1.0, maximum=MAX_SHARPNESS)
        step.number("overhead_s", minimum=0.0, maximum=3600.0)
        step.number_or_none("overhead_per_seq_s", minimum=0.0, maximum=3600.0)
        step.number_or_none("request_overhead_s", minimum=0.0, maximum=3600.0)
        step.number_or_none("request_overhead_s_per_token", minimum=0.0, maximum=SECONDS_PER_TOKEN)
        for name in ("comm_fixed_s", "unsplit_fixed_s", "unsplit_prefill_s"):
            step.number_or_none(name, minimum=0.0, maximum=3600.0)
        for name in ("comm_per_token_s", "unsplit_per_token_s"):
            step.number_or_none(name, minimum=0.0, maximum=SECONDS_PER_TOKEN)
        step.text("mode")
