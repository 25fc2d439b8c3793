"""`budgettune replay` says what the server's prefix cache hit, from the server's own counters:
six requests in two groups sharing 512-token prefixes, one at a time, hit 4 x 512 tokens."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def test_replay_prints_the_servers_hit_share(budgettune_cmd: list[str], tmp_path: Path) -> None:
    trace = tmp_path / "shared.jsonl"
    row = {"prompt_tokens": 600, "output_tokens": 4, "prefix_tokens": 512}
    trace.write_text("".join(
        json.dumps({"arrival_s": 0.5 * i, "prefix_group": i % 2, **row}) + "\n" for i in range(6)
    ))  # fmt: skip
    done = subprocess.run(
        [*budgettune_cmd, "replay", "--engine", "sim", "--trace", str(trace), "--budget", "1024",
         "-o", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    said = " ".join(done.stdout.split())
    share = 4 * 512 / (6 * 600)
    assert (
        f"prefix cache (the server's counters): {share:.1%} of prompt tokens hit (2,048 of 3,600)"
        in said
    )
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    server = saved["points"][0]["selfcheck"]["server"]
    assert (server["prefix_cache_queries_total"], server["prefix_cache_hits_total"]) == (3600, 2048)
