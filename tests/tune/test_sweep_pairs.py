"""The budget and max-num-seqs tuned together, end to end on the embedded engine: the two-knob
search finds the exhaustive grid's pair with at most half its launches, and the run folder
carries both knobs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from rising_tbt import WORKLOAD

pytestmark = pytest.mark.slow

# rising_tbt.WORKLOAD at max-num-seqs 4, 16 and 64, as the simulator predicts it: p99 TBT about
# 8, 15, 30 and 58 ms at 256-2048 whatever the limit (few decoders share an iteration), and p99
# TTFT about 4 s with 4 running sequences (requests queue for a slot), 0.3-0.5 s with 16 and
# 0.25 s with 64. With a 46 ms TBT SLO and 1 s TTFT the answer is budget 1024 at max-num-seqs 64,
# with 12+ ms of TBT margin either side and seconds of TTFT margin.
PAIRS = [*WORKLOAD, "--slo-tbt", "46ms", "--budgets", "256,512,1024,2048",
         "--max-num-seqs", "4,16,64", "--max-replays", "1"]  # fmt: skip


def run(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cmd, "sweep", *PAIRS, *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.timing  # the answer rests on 12+ ms of TBT margin
def test_the_pair_search_finds_the_grids_pair_with_half_its_launches(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    searched = run(budgettune_cmd, "-o", str(tmp_path / "search"))
    assert searched.returncode == 0, searched.stderr[-3000:]
    grid = run(budgettune_cmd, "--exhaustive", "-o", str(tmp_path / "grid"))
    assert grid.returncode == 0, grid.stderr[-3000:]

    found = json.loads((tmp_path / "search" / "recommendation.json").read_text())
    truth = json.loads((tmp_path / "grid" / "recommendation.json").read_text())
    entries = truth["pairs"]["entries"]
    assert (truth["budget"], truth["max_num_seqs"]) == (1024, 64), [
        (e["budget"], e["max_num_seqs"], e["tbt_ms"], e["ttft_ms"]) for e in entries
    ]
    assert (found["budget"], found["max_num_seqs"]) == (truth["budget"], truth["max_num_seqs"])
    assert truth["pairs"]["launches"] == 12 and all(e["measured"] for e in entries)
    assert found["pairs"]["launches"] <= 6, found["pairs"]["entries"]
    assert found["pairs"]["chosen"] == {"budget": 1024, "max_num_seqs": 64}
    by_pair = {(e["budget"], e["max_num_seqs"]): e for e in found["pairs"]["entries"]}
    assert by_pair[(2048, 64)]["measured"] and by_pair[(2048, 64)]["ok"] is False  # the cliff

    text = " ".join(searched.stdout.split())
    assert "Recommended: budget 1024 with max-num-seqs 64." in text
    assert "2048 breaks p99 TBT" in text
    # the config carries both knobs; each value's measurements are in a folder of its own
    lines = (tmp_path / "search" / "vllm.yaml").read_text().splitlines()
    assert {"max-num-batched-tokens: 1024", "max-num-seqs: 64"} <= set(lines)
    measured_at_64 = [
        json.loads(line)
        for line in (tmp_path / "search" / "seqs-64" / "points.jsonl").read_text().splitlines()
    ]
    assert {p["budget"] for p in measured_at_64} >= {1024, 2048}
    assert all(p["engine"]["max_num_seqs"] == 64 for p in measured_at_64)
    # the report draws both knobs, and `budgettune report` rebuilds the same page
    page = (tmp_path / "search" / "report.html").read_text()
    assert 'id="chart-pairs-tbt"' in page and 'id="chart-pairs-ttft"' in page
    rebuilt = subprocess.run(
        [*budgettune_cmd, "report", str(tmp_path / "search"), "-o", str(tmp_path / "again.html")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (tmp_path / "again.html").read_text().count("chart-pairs-") == page.count("chart-pairs-")
