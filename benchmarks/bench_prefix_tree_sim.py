"""Benchmark: a window of Mooncake's multi-turn trace (its `hash_ids` record which 512-token
blocks requests share, 80% of its prompt tokens) replayed with the prefix cache on the built-in
engine, twice on one engine, against the simulator and the traffic's own share.

Prints the window's expected hit share (`trace inspect`'s: a cache with unbounded space), the
simulator's share, and each replay's share from the engine's own counters (vLLM's names). Targets:
the simulator within 5 points of the expected share; the second replay (a re-measure on the same
engine, every prompt drawn afresh) the same share as the first, nothing carried over.

    .venv/bin/python benchmarks/bench_prefix_tree_sim.py \
        --trace ../shared/traces/mooncake-synthetic.jsonl [--window 900s:1000s] [--rate 1.5]
        [--requests 150] [--budget 2048] [--gpu b200]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from budgettune.app.requests import ModelRequest
from budgettune.app.step_model import step_model_of
from budgettune.core.cache_count import PrefixCacheCount
from budgettune.core.hardware import resolve_gpu
from budgettune.engines.base import LaunchSpec
from budgettune.engines.embedded.engine import SimEngine
from budgettune.loadgen.runner import RunOptions, RunOutcome, Target, run_schedule
from budgettune.loadgen.server_metrics import server_side
from budgettune.sim.kvcache import kv_capacity_blocks
from budgettune.sim.scheduler import SchedulerConfig
from budgettune.sim.simulator import simulate
from budgettune.trace.load import load_trace
from budgettune.trace.prefix_blocks import unbounded_hit_share
from budgettune.trace.replay import ReplayOptions, parse_window, schedule_from_trace
from budgettune.trace.schedule import Schedule


def measured(outcome: RunOutcome) -> PrefixCacheCount:
    counters = server_side(outcome.server_before, outcome.server_after).counters
    found = PrefixCacheCount.from_counters(counters)
    assert found is not None, "the engine exported no prefix-cache counters"
    return found


async def replay_twice(schedule: Schedule, spec: LaunchSpec) -> list[tuple[RunOutcome, float]]:
    out = []
    async with SimEngine().launch(spec) as handle:
        target = Target(handle.url, handle.model)
        for _ in range(2):
            started = time.monotonic()
            outcome = await run_schedule(schedule, target, RunOptions(request_timeout_s=600))
            out.append((outcome, time.monotonic() - started))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", required=True)
    parser.add_argument("--window", default="900s:1000s")
    parser.add_argument("--rate", type=float, default=1.5)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--budget", type=int, default=2048)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--gpu", default="b200")
    parser.add_argument("--max-model-len", type=int, default=131072)
    args = parser.parse_args()
    trace, _ = load_trace(args.trace, max_model_len=args.max_model_len, on_long="clip")
    schedule = schedule_from_trace(
        trace,
        ReplayOptions(window_s=parse_window(args.window), rate_per_s=args.rate,
                      requests=args.requests),
    )  # fmt: skip
    expected = unbounded_hit_share(
        schedule.prompt_tokens, schedule.prefix_group, schedule.prefix_tokens,
        shared=schedule.shared_blocks,
    )  # fmt: skip
    model = step_model_of(ModelRequest(model=args.model, gpu=args.gpu))
    blocks = kv_capacity_blocks(model, resolve_gpu(args.gpu))
    config = SchedulerConfig(budget_tokens=args.budget, kv_capacity_blocks=blocks,
                             prefix_caching=True)  # fmt: skip
    sim = simulate(schedule, model, config).prefix_cache
    assert sim is not None and sim.hit_share is not None
    print(f"{args.trace} window {args.window}, first {len(schedule)} requests at {args.rate}/s, "
          f"prompt mean {schedule.prompt_tokens.mean():,.0f} tokens; {args.model} on {args.gpu}, "
          f"budget {args.budget}, KV {blocks:,} blocks")  # fmt: skip
    print(f"expected (unbounded cache) {expected:.1%}")
    print(f"simulator {sim.hit_share:.1%} ({(sim.hit_share - expected) * 100:+.1f} points)")
    spec = LaunchSpec(budget_tokens=args.budget, prefix_caching=True, model=args.model,
                      gpu=args.gpu, max_model_len=args.max_model_len)  # fmt: skip
    for number, (outcome, wall_s) in enumerate(asyncio.run(replay_twice(schedule, spec)), 1):
        count = measured(outcome)
        share = count.hit_share or 0.0
        print(f"replay {number} (salt {outcome.content_salt}): engine {share:.1%} "
              f"({count.hits_tokens:,} of {count.queries_tokens:,} tokens; "
              f"{(share - expected) * 100:+.1f} points), {wall_s:.0f} s, "
              f"complete {outcome.complete}")  # fmt: skip


if __name__ == "__main__":
    main()
