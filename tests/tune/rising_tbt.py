"""The embedded-engine workload the sweep tests share: p99 TBT rises steadily with the budget (the
simulator predicts 15, 30, 58 and 86 ms at 512, 1024, 2048 and 3072 tokens on the analytic
8B/H100 model in the seed calibration, which these figures were chosen in; the real-time engine
measures a few ms more, and 2048 has read 44 ms) while p99 TTFT stays near 300 ms: with a 46 ms
TBT SLO the answer is 1024, with at least 11 ms of margin on either side for a busy machine's
jitter."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

WORKLOAD = [
    "--engine", "sim", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", "seed",
    "--prompt-dist", "lognormal:mean=1500,sigma=0.5,max=6000",
    "--output-dist", "lognormal:mean=64,sigma=0.5,max=256",
    "--rate", "16", "--requests", "60", "--seed", "0", "--slo-ttft", "1s",
]  # fmt: skip
CANDIDATES = "512,1024,2048,3072,4096"
# The question every test of this workload asks, one replay per budget.
SEARCH = [*WORKLOAD, "--slo-tbt", "46ms", "--budgets", CANDIDATES, "--max-replays", "1"]
ANSWER = 1024


@dataclass(slots=True, frozen=True)
class SweepRun:
    """One finished `budgettune sweep`: what it printed, and its run folder."""

    done: subprocess.CompletedProcess[str]
    run_dir: Path
