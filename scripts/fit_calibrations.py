"""Fit the measured calibrations to the reference data in data/aiconfigurator/, print the tables
to paste into budgettune/model/calibration.py (``_FITTED`` and the two floors) and
budgettune/model/allreduce.py (``_FITTED``), and print how well they generalise.

What is fitted to what (budgettune/profiling/reference_fit.py says more):

- per GPU, to its one-GPU iterations (Llama-3.1-8B, Qwen3-32B): the compute, weight- and
  KV-streaming shares of peak and the knee's sharpness, in the overlap variant that fits better;
- two per-layer floors shared by every GPU (each iteration's, and more with a prompt chunk), to
  the same one-GPU iterations;
- per GPU and GPU count, to AIConfigurator's all-reduce table: the link's share and a latency.

GPU time only (t0 and the per-sequence CPU time are 0: the database has none). The iterations
split over 2, 4 and 8 GPUs (Llama-3.1-70B, Qwen3-32B) are fitted to by nothing: their errors
are held out. So are the leave-one-out errors: each GPU refitted without one shape, and one
calibration fitted to every other GPU, each tested on what it did not see. Needs only
budgettune (numpy, scipy), not AIConfigurator:

    python scripts/fit_calibrations.py [--data data/aiconfigurator]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from budgettune.profiling import reference_fit as rf

TARGET_RMS = 0.12


def line(name: str, errors: rf.FloatArray) -> str:
    return f"  {name:<34} {len(errors):>5} {rf.rms(errors):>7.1%} {rf.worst(errors):>7.1%}"


def section(title: str, results: Sequence[rf.LeftOut]) -> None:
    print(f"\n{title}\n  {'file':<34} {'points':>5} {'RMS':>7} {'max':>7}")
    for r in results:
        print(line(r.file.name, r.errors))


def summary(label: str, results: Sequence[rf.LeftOut]) -> None:
    one, split = rf.pooled(results, [1]), rf.pooled(results, [4, 8])
    two = rf.pooled(results, [2])
    print(
        f"{label:<26} TP 1 {rf.rms(one):6.1%}   TP 2 {rf.rms(two):6.1%}   "
        f"TP 4-8 {rf.rms(split):6.1%}   (RMS, every point pooled)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("data/aiconfigurator"))
    args = parser.parse_args(argv)
    files = rf.read_reference(args.data)
    tables = rf.read_allreduce(args.data)
    if not files or not tables:
        print(f"no reference files or all-reduce tables in {args.data}", file=sys.stderr)
        return 2

    floors = rf.fit_floors(files)
    calibrations = rf.fit_per_gpu(files, floors)
    allreduce = {gpu: rf.fit_allreduce(gpu, rows) for gpu, rows in tables.items()}

    print("All-reduce: each GPU count's two figures against its table (RMS, max)")
    for gpu, rows in tables.items():
        errors = rf.allreduce_errors(gpu, rows, allreduce[gpu])
        print(
            f"  {gpu:<10}"
            + "".join(f"  {n} GPUs {rf.rms(e):5.1%} {rf.worst(e):5.1%}" for n, e in errors.items())
        )

    fitted = [
        rf.LeftOut(f, "none", rf.file_errors(f, calibrations[f.gpu])) for f in files if f.gpus == 1
    ]
    section("Fitted: the one-GPU files, against the figures fitted to them", fitted)
    split = rf.split_errors(files, lambda gpu: calibrations[gpu])
    section("Held out: the split files (nothing fitted to them)", split)
    shape_out = rf.leave_shape_out(files, floors)
    section("Left out: each GPU refitted without the shape", shape_out)
    gpu_out = rf.leave_gpu_out(files, floors)
    section("Left out: one calibration fitted to the other GPUs", gpu_out)
    seed = [rf.LeftOut(f, "none", rf.file_errors(f, rf.shipped("seed")(f.gpu))) for f in files]

    print("\nWhere the seed's constants generalise better than the shape left out:")
    by_name = {r.file.name: r for r in seed}
    better = [
        f"  {r.file.name}: seed {rf.rms(by_name[r.file.name].errors):.1%} against "
        f"{rf.rms(r.errors):.1%} left out"
        for r in shape_out
        if rf.rms(by_name[r.file.name].errors) < rf.rms(r.errors)
    ]
    print("\n".join(better) or "  nowhere")

    print(f"\nSummary (target: left-out RMS at most {TARGET_RMS:.0%} for TP 1 and TP 4-8)")
    summary("fitted / held out", [*fitted, *split])
    summary("shape left out", shape_out)
    summary("GPU left out", gpu_out)
    summary("seed calibration", seed)

    print("\n_FITTED (budgettune/model/calibration.py):")
    for gpu, cal in calibrations.items():
        print(
            f'    "{gpu}": ({cal.compute_efficiency:.3f}, {cal.weight_bandwidth_efficiency:.3f}, '
            f'{cal.kv_bandwidth_efficiency:.3f}, {cal.sharpness:.3f}, "{cal.mode}"),'
        )
    print(f"MEASURED_LAYER_FLOOR_S = {floors[0] * 1e6:.0f}e-6")
    print(f"MEASURED_PREFILL_LAYER_FLOOR_S = {floors[1] * 1e6:.0f}e-6")
    print("\n_FITTED (budgettune/model/allreduce.py):")
    for gpu, figures in allreduce.items():
        print(f'    "{gpu}": {figures},')
    return 0


if __name__ == "__main__":
    sys.exit(main())
