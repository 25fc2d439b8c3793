"""A CPU stand-in for the ``sgl_kernel`` names SGLang 0.5.23 imports when it runs on a CPU
(``SGLANG_USE_CPU_ENGINE=1``), for budgettune's test environment only.

Why it exists: on a CPU SGLang imports its CPU kernels from ``sgl_kernel`` at module level
(``from sgl_kernel import ...`` under ``if is_cpu():``), but the registry's ``sgl-kernel`` and
``sglang-kernel`` wheels are CUDA builds, and SGLang's CPU kernels (``sgl-kernel/csrc/cpu``)
must be compiled from SGLang's source tree. Importing ``sglang.launch_server`` and serving a
Llama asks for exactly the eight names below (found by a recording stand-in, see the README's
"SGLang on a CPU").

Three are bookkeeping ops on the KV cache and the request-to-token table, which a plain
Llama uses; they are written here in PyTorch with the semantics of the Triton kernels SGLang
runs on GPUs beside each CPU call (each function names its caller and kernel). The five others
belong to speculative decoding (EAGLE), which budgettune never enables: they raise
:class:`NotImplementedError` naming themselves.

No ``torch.ops.sgl_kernel`` operator is registered, so SGLang's check for its AMX CPU kernels
(``sglang/srt/utils/common.py``: ``hasattr(torch.ops.sgl_kernel, "convert_weight_packed")``)
is False: layers run their ``forward_native`` paths and attention the ``torch_native`` backend.
That is SGLang's own slow path: right for measuring its scheduler, metrics and lifecycle, not
its kernels' speed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

__version__ = "0.0.1+budgettune.cpu.shim"

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]


def _bounds(start_offset: torch.Tensor, end_offset: torch.Tensor) -> list[tuple[int, int]]:
    return list(zip(start_offset.tolist(), end_offset.tolist(), strict=True))


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's newly allocated KV slots into its row of the request-to-token
    table: ``req_to_token[req_pool_indices[i], start[i]:end[i]] = out_cache_loc[o:o + n]``,
    where ``o`` is the sum of the earlier requests' ``end - start`` (they are packed in order).

    Caller: ``assign_req_to_token_pool_func`` (sglang/srt/mem_cache/allocation.py), used when
    decode and extend batches allocate slots; its GPU twin is the Triton kernel
    ``assign_req_to_token_pool`` in the same file. ``pool_len`` is ``req_to_token.shape[1]``.
    """
    if req_to_token.shape[1] != pool_len:
        raise ValueError(f"pool_len {pool_len} != req_to_token.shape[1] {req_to_token.shape[1]}")
    offset = 0
    for row, (start, end) in zip(
        req_pool_indices.tolist(), _bounds(start_offset, end_offset), strict=True
    ):
        n = end - start
        if n > 0:
            req_to_token[row, start:end] = out_cache_loc[offset : offset + n].to(
                req_to_token.dtype
            )
        offset += max(n, 0)


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """The reverse of :func:`assign_req_to_token_pool_cpu`: gather each request's slots
    ``req_to_token[req_pool_indices[i], start[i]:end[i]]`` into ``out_cache_loc``, packed in
    request order.

    Callers: ``assign_extend_cache_locs_func`` and ``fill_front_out_cache_loc_func``
    (sglang/kernels/ops/speculative/cache_locs.py); GPU twin: the Triton kernel
    ``assign_extend_cache_locs`` there.
    """
    if req_to_token.shape[1] != pool_len:
        raise ValueError(f"pool_len {pool_len} != req_to_token.shape[1] {req_to_token.shape[1]}")
    offset = 0
    for row, (start, end) in zip(
        req_pool_indices.tolist(), _bounds(start_offset, end_offset), strict=True
    ):
        n = end - start
        if n > 0:
            out_cache_loc[offset : offset + n] = req_to_token[row, start:end].to(
                out_cache_loc.dtype
            )
        offset += max(n, 0)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Move KV slots: in every KV buffer (one address per layer's K and V buffer in
    ``data_ptrs``, each buffer's row size in bytes in ``strides``), copy row ``src_loc[j]`` onto
    row ``tgt_loc[j]``. All source rows are read before any target row is written, so
    overlapping locations copy as the Triton kernel's one gather-then-scatter does.

    Caller: ``copy_all_layer_kv_cache_func`` (sglang/kernels/ops/kvcache/cache_move.py), from
    ``MHATokenToKVPool.move_kv_cache`` and, once at start, the pool's warm-up copy of slot 0
    onto itself (sglang/srt/mem_cache/memory_pool.py); GPU twin: the Triton kernel
    ``copy_all_layer_kv_cache_tiled``. SGLang passes raw addresses of contiguous CPU buffers it
    owns, so each buffer is viewed as bytes through ctypes, up to the highest row touched.
    """
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError(f"{tgt_loc.numel()} target slots for {src_loc.numel()} source slots")
    if tgt_loc.numel() == 0:
        return
    tgt = tgt_loc.to(torch.int64)
    src = src_loc.to(torch.int64)
    rows = int(torch.maximum(tgt.max(), src.max()).item()) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * int(stride))).from_address(int(address))
        view = torch.frombuffer(raw, dtype=torch.uint8).view(rows, int(stride))
        view[tgt] = view[src]  # advanced indexing gathers a copy first


def _speculative(name: str) -> Callable[..., None]:
    def refuse(*args: object, **kwargs: object) -> None:
        raise NotImplementedError(
            f"sgl_kernel.{name} is not in budgettune's CPU shim of sgl_kernel: it serves "
            "speculative decoding, which needs SGLang's compiled CPU kernels "
            "(sgl-kernel/csrc/cpu); run SGLang without --speculative-algorithm"
        )

    refuse.__name__ = name
    refuse.__qualname__ = name
    return refuse


# Speculative decoding (EAGLE) only: sglang/kernels/ops/speculative/{cache_locs,eagle,spec_tree}.py
assign_draft_cache_locs_contiguous_cpu = _speculative("assign_draft_cache_locs_contiguous_cpu")
fill_accept_out_cache_loc_cpu = _speculative("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _speculative("fill_bonus_tokens_cpu")
build_tree_kernel_efficient_cpu = _speculative("build_tree_kernel_efficient_cpu")
verify_tree_greedy_cpu = _speculative("verify_tree_greedy_cpu")
