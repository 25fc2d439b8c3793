"""The embedded engine's settings (:class:`SimServerConfig`), checked once when made. Field names
follow ``budgettune serve``'s options, so an error about a field reads as the option there."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from budgettune.core.errors import SpecError
from budgettune.model.stepmodel import (
    DEFAULT_BANDWIDTH_EFFICIENCY,
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_OVERHEAD_S,
)
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE


@dataclass(slots=True, frozen=True)
class SimServerConfig:
    """The sim engine's settings. budget_tokens None means no chunking (prefill-first).

    Raises SpecError naming the field for a time_scale that is not positive or a
    stream_interval below 1.
    """

    budget_tokens: int | None = 2048
    max_num_seqs: int = 256
    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    dtype: str = "bfloat16"
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int = DEFAULT_BLOCK_SIZE
    long_prefill_token_threshold: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    time_scale: float = 1.0
    stream_interval: int = 1
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    bandwidth_efficiency: float = DEFAULT_BANDWIDTH_EFFICIENCY
    overhead_ms: float = DEFAULT_OVERHEAD_S * 1e3
    mode: str = "overlapped"
    emission_log: Path | None = None
    profile: Path | None = None  # a `budgettune profile` file: its calibrated model, not presets

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise SpecError(f"must be positive, got {self.time_scale}", field="time_scale")
        if self.stream_interval < 1:
            raise SpecError(
                f"must be at least 1, got {self.stream_interval}", field="stream_interval"
            )
