"""The CPU stand-in for `sgl_kernel` (scripts/sglang_cpu_shim) against SGLang's own Triton
kernels, which Triton's interpreter (TRITON_INTERPRET=1) runs on CPU tensors in SGLang's venv:
the three KV-cache/request-pool ops must leave the same tensors. Without SGLang, in this
interpreter: the speculative-decoding names refuse, naming themselves."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from sglang_env import sglang_python_or_skip
from vllm_env import REPO_ROOT

SHIM = REPO_ROOT / "scripts" / "sglang_cpu_shim"

AGAINST_TRITON = textwrap.dedent(
    """
    import os
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from sglang.kernels.ops.kvcache.cache_move import copy_all_layer_kv_cache_tiled
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool
    import sgl_kernel

    g = torch.Generator().manual_seed(0)
    rows = torch.tensor([4, 1, 3])
    start, end = torch.tensor([0, 5, 17]), torch.tensor([7, 5, 40])  # one request adds none
    n = int((end - start).sum())
    locs = torch.randint(1, 10_000, (n,), generator=g)
    pools = [torch.zeros(6, 40, dtype=torch.int32) for _ in range(2)]
    assign_req_to_token_pool[(3,)](rows, pools[0], start, end, locs, 40, 4)
    sgl_kernel.assign_req_to_token_pool_cpu(rows, pools[1], start, end, locs, 40)
    assert torch.equal(*pools) and int((pools[0] != 0).sum()) == n, pools

    table = torch.randint(1, 10_000, (6, 40), generator=g, dtype=torch.int32)
    outs = [torch.zeros(n, dtype=torch.int64) for _ in range(2)]
    assign_extend_cache_locs[(3,)](rows, table, start, end, outs[0], 40, 4)
    sgl_kernel.assign_extend_cache_locs_cpu(rows, table, start, end, outs[1], 40)
    assert torch.equal(*outs) and bool((outs[0] != 0).all()), outs

    # K/V buffers of two layouts; slots 3 and 7 swap (overlapping source and target).
    made = [torch.randn(20, 2, 8, generator=g) for _ in range(3)]
    made.append(torch.randn(20, 4, generator=g).to(torch.bfloat16))
    tgt, src = torch.tensor([3, 7, 8, 0]), torch.tensor([7, 3, 19, 8])
    results = []
    for _ in range(2):
        bufs = [b.clone() for b in made]
        ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
        strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in bufs])
        results.append((bufs, ptrs, strides))
    bufs, ptrs, strides = results[0]
    copy_all_layer_kv_cache_tiled[(len(bufs), 4)](ptrs, strides, tgt, src, 4, 4, BYTES_PER_TILE=128)
    bufs2, ptrs2, strides2 = results[1]
    sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs2, strides2, tgt, src)
    for a, b, before in zip(bufs, bufs2, made):
        assert torch.equal(a, b)
        assert torch.equal(a[tgt], before[src]) and not torch.equal(a, before)
    print("shim matches SGLang's Triton kernels")
    """
)


@pytest.mark.sglang
def test_shim_ops_match_sglangs_triton_kernels() -> None:
    python = sglang_python_or_skip()
    done = subprocess.run(
        [str(python), "-c", AGAINST_TRITON],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "shim matches SGLang's Triton kernels" in done.stdout


def test_speculative_names_refuse_by_name() -> None:
    sys.path.insert(0, str(SHIM))  # the shim is PyTorch code: this needs the torch extra
    try:
        import sgl_kernel  # the shim, not a CUDA build: none is installed in this interpreter
    finally:
        sys.path.remove(str(SHIM))
    assert sgl_kernel.__file__ is not None and sgl_kernel.__file__.startswith(str(SHIM))
    speculative = set(sgl_kernel.__all__) - {
        "assign_req_to_token_pool_cpu", "assign_extend_cache_locs_cpu",
        "copy_all_layer_kv_cache_cpu",
    }  # fmt: skip
    assert len(speculative) == 5
    for name in speculative:
        with pytest.raises(NotImplementedError, match=rf"^sgl_kernel\.{name} is not in"):
            getattr(sgl_kernel, name)(1, x=2)
