"""The embedded engine's settings (:class:`SimServerConfig`), checked once when made. Field names
follow ``budgettune serve``'s options, so an error about a field reads as the option there."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from budgettune.core.errors import SpecError
from budgettune.core.limits import (
    MAX_BLOCK_TOKENS,
    MAX_DURATION_S,
    MAX_SEQS,
    check_count,
    check_number,
    check_port,
    check_share,
    check_tokens,
)
from budgettune.engines.embedded.http11 import (
    DEFAULT_KEEP_ALIVE_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)
from budgettune.model.calibration import CalibrationChoice
from budgettune.sim.kvcache import DEFAULT_BLOCK_SIZE

MAX_TIME_SCALE = 1e6  # --time-scale: a million times slower is beyond any use


@dataclass(slots=True, frozen=True)
class SimServerConfig:
    """The sim engine's settings. budget_tokens None means no chunking (prefill-first).

    api_key set: /v1 paths need ``Authorization: Bearer api_key`` (vLLM's rule).
    Raises SpecError naming the field for a time_scale or a timeout that is not positive, or a
    stream_interval below 1.
    """

    budget_tokens: int | None = 2048
    max_num_seqs: int = 256
    model: str = "llama-3.1-8b"
    gpu: str = "h100-sxm"
    dtype: str = "bfloat16"
    tensor_parallel: int = 1  # GPUs the model is split over (presets only; a profile says its own)
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int = DEFAULT_BLOCK_SIZE
    long_prefill_token_threshold: int = 0
    prefix_caching: bool = True  # vLLM V1's default for a decoder model (CacheConfig)
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None
    time_scale: float = 1.0
    stream_interval: int = 1
    calibration: CalibrationChoice = CalibrationChoice()  # the figures given: None, its own
    emission_log: Path | None = None
    profile: Path | None = None  # a `budgettune profile` file: its calibrated model, not presets
    api_key: str | None = field(default=None, repr=False)  # a secret: kept out of reprs
    keep_alive_timeout_s: float = DEFAULT_KEEP_ALIVE_TIMEOUT_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S

    def __post_init__(self) -> None:
        check_number(self.time_scale, field="time_scale", maximum=MAX_TIME_SCALE)
        for name in ("keep_alive_timeout_s", "request_timeout_s"):
            check_number(getattr(self, name), field=name, maximum=MAX_DURATION_S)
        if self.stream_interval < 1:
            raise SpecError(
                f"must be at least 1, got {self.stream_interval}", field="stream_interval"
            )
        check_tokens(self.stream_interval, field="stream_interval")
        if self.budget_tokens is not None:
            check_tokens(self.budget_tokens, field="budget")
        check_count(self.max_num_seqs, field="max_num_seqs", maximum=MAX_SEQS)
        if self.max_model_len is not None:
            check_tokens(self.max_model_len, field="max_model_len", minimum=2)
        check_share(self.gpu_memory_utilization, field="gpu_memory_utilization")
        check_count(self.block_size, field="block_size", maximum=MAX_BLOCK_TOKENS, what="tokens")
        check_tokens(
            self.long_prefill_token_threshold, field="long_prefill_token_threshold", minimum=0
        )
        check_port(self.port, field="port", allow_zero=True)
