"""Extract the reference iteration times the measured calibrations are fitted to, from NVIDIA
AIConfigurator's silicon-measured performance database (vLLM backend), into data/aiconfigurator/.

Needs ``pip install aiconfigurator==0.12.0`` (Apache-2.0) beside budgettune, e.g. in its own
environment with this checkout on PYTHONPATH:

    python3.11 -m venv .venv-aic && .venv-aic/bin/pip install aiconfigurator==0.12.0
    PYTHONPATH=. .venv-aic/bin/python scripts/aic_reference.py [--out data/aiconfigurator]

One CSV per (model, GPU), the columns ``budgettune profile --from`` reads: ``prefill_tokens``,
``decode_batch``, ``context_tokens``, ``ms``, plus ``silicon_share`` (the share of the estimate
that AIConfigurator took from silicon-measured kernel tables; the rest, norms, activations and
the embedding lookup, is its own empirical formula). Every row is one iteration, GPU time only
(AIConfigurator adds no CPU overhead to a step):

- prefill: one prompt of P tokens, nothing cached;
- decode: b sequences decoding at context c;
- mixed: a prompt chunk of n < c tokens at offset 0 beside b decodes at context c, composed
  from AIConfigurator's mixed-step breakdown as ``budgettune.profiling.aiconfigurator`` says.

Shapes whose KV cache would not fit beside the weights (0.9 of the GPU's memory, as
budgettune's simulator sizes it) are left out: a GPU never runs them.

Tensor parallelism, in ``tp/``: the same iterations of Llama-3.1-70B and Qwen3-32B split over 2,
4 and 8 GPUs (``<model>_<gpu>_tp<n>.csv``, where the weights fit), which nothing is fitted to;
and in ``allreduce/``: the all-reduce table AIConfigurator's vLLM backend reads for each GPU
(``custom_allreduce_perf.parquet``, CUDA-graph kernel, bfloat16), which the step model's
communication term is fitted to (``<gpu>.csv``: ``gpus``, ``elements``, ``ms``).
"""

from __future__ import annotations

import argparse
import csv
import importlib.metadata
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from budgettune.core.errors import SpecError
from budgettune.core.hardware import ModelShape, resolve_gpu, resolve_model
from budgettune.model.stepmodel import StepModel
from budgettune.profiling.aiconfigurator import BACKEND, SYSTEMS, TESTED_VERSION, AicEstimator
from budgettune.sim.kvcache import kv_capacity_blocks

PAIRS = (
    *((("llama-3.1-8b", gpu)) for gpu in ("h100-sxm", "h200", "a100-80g", "b200", "l40s")),
    # Qwen3-32B's 65 GB of weights leave the L40S's 48 GB no room.
    *((("qwen3-32b", gpu)) for gpu in ("h100-sxm", "h200", "a100-80g", "b200")),
)
PREFILL_TOKENS = (*range(8, 1025, 8), *range(1152, 4097, 128), 5120, 6144, 7168, 8192)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_CONTEXTS = (256, 1024, 4096)
GPUS = ("h100-sxm", "h200", "a100-80g", "b200", "l40s")
TP_PAIRS = tuple((model, gpu) for model in ("llama-3.1-70b", "qwen3-32b") for gpu in GPUS)
TP_SIZES = (2, 4, 8)
ALLREDUCE_KERNEL = "vllm_graph"  # vLLM's custom all-reduce, captured in CUDA graphs
MIXED_CHUNKS = (64, 128, 256, 512, 1024, 2048)
MIXED_BATCHES = (16, 64, 128)
MIXED_CONTEXTS = (1024, 4096)


@dataclass(frozen=True, slots=True)
class Row:
    prefill_tokens: int
    decode_batch: int
    context_tokens: int
    ms: float
    silicon_share: float


def shapes(shape: ModelShape, capacity_tokens: int) -> list[tuple[int, int, int]]:
    """(prompt, decodes, context) of every reference iteration that fits the KV cache."""
    limit = shape.max_position_embeddings or max(PREFILL_TOKENS)
    out = [(p, 0, 0) for p in PREFILL_TOKENS if p <= min(limit, capacity_tokens)]
    out += [
        (0, b, c) for c in DECODE_CONTEXTS for b in DECODE_BATCHES if b * (c + 1) <= capacity_tokens
    ]
    out += [
        (n, b, c)
        for c in MIXED_CONTEXTS
        for n in MIXED_CHUNKS
        for b in MIXED_BATCHES
        if n < c and n + b * (c + 1) <= capacity_tokens
    ]
    return out


def extract(model_name: str, gpu_name: str, tensor_parallel: int = 1) -> list[Row]:
    """Every reference row of one (model, GPU) pair that fits the GPUs' memory (none when the
    weights alone do not fit)."""
    shape = resolve_model(model_name)
    gpu = resolve_gpu(gpu_name)
    try:
        blocks = kv_capacity_blocks(
            StepModel.from_hardware(shape, gpu), gpu, tensor_parallel=tensor_parallel
        )
    except SpecError:
        return []
    capacity_tokens = blocks * 16
    estimator = AicEstimator(model_name, gpu_name, tensor_parallel=tensor_parallel)
    rows = []
    for p, b, c in shapes(shape, capacity_tokens):
        est = estimator.iteration(p, b, c)
        rows.append(Row(p, b, c, est.seconds * 1e3, est.silicon_share))
    return rows


def write(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["prefill_tokens", "decode_batch", "context_tokens", "ms", "silicon_share"])
        for r in rows:
            writer.writerow(
                [r.prefill_tokens, r.decode_batch, r.context_tokens, f"{r.ms:.5g}",
                 f"{r.silicon_share:.3f}"]
            )  # fmt: skip


def allreduce_rows(gpu_name: str) -> list[tuple[int, int, float]]:
    """(gpus, elements, ms) of the all-reduce table the vLLM backend reads for ``gpu_name``: the
    newest collected version at or before the one the database queries (it fills a version
    without a table from the one before, as the L40S's 0.24.0 from 0.22.0)."""
    import aiconfigurator_core
    import pandas as pd
    from aiconfigurator_core.sdk.perf_database import get_database
    from packaging.version import Version

    system = SYSTEMS[gpu_name]
    queried = Version(get_database(system, BACKEND, "current").version)
    tables = Path(aiconfigurator_core.__file__).parent / "systems" / "data" / system / "comm"
    versions = [
        Version(d.name)
        for d in (tables / BACKEND).iterdir()
        if (d / "custom_allreduce_perf.parquet").is_file() and Version(d.name) <= queried
    ]
    path = tables / BACKEND / str(max(versions)) / "custom_allreduce_perf.parquet"
    frame = pd.read_parquet(path)
    frame = frame[(frame.backend == ALLREDUCE_KERNEL) & (frame.allreduce_dtype == "bfloat16")]
    return sorted(
        (int(r.num_gpus), int(r.message_size), float(r.latency)) for r in frame.itertuples()
    )


def write_allreduce(rows: list[tuple[int, int, float]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["gpus", "elements", "ms"])
        writer.writerows([n, e, f"{ms:.5g}"] for n, e, ms in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("data/aiconfigurator"))
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # AIConfigurator logs every fallback table it loads
    found = importlib.metadata.version("aiconfigurator-core")
    if found != TESTED_VERSION:
        print(f"expected aiconfigurator-core {TESTED_VERSION}, found {found}", file=sys.stderr)
        return 2
    for model, gpu in PAIRS:
        rows = extract(model, gpu)
        path = args.out / f"{model}_{gpu}.csv"
        write(rows, path)
        print(f"{path}: {len(rows)} rows")
    for model, gpu in TP_PAIRS:
        for tp in TP_SIZES:
            rows = extract(model, gpu, tp)
            if rows:
                path = args.out / "tp" / f"{model}_{gpu}_tp{tp}.csv"
                write(rows, path)
                print(f"{path}: {len(rows)} rows")
    for gpu in GPUS:
        path = args.out / "allreduce" / f"{gpu}.csv"
        write_allreduce(allreduce_rows(gpu), path)
        print(f"{path}: all-reduce table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
