"""The budget and max-num-seqs tuned together, end to end on the embedded engine: the two-knob
search finds the exhaustive grid's pair with at most half its launches, and the run folder
carries both knobs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from rising_tbt import WORKLOAD

from budgettune.tune.pair_grid import seqs_candidates

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


def test_auto_tunes_the_values_its_plan_gives(budgettune_cmd: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [*budgettune_cmd, "sweep", *WORKLOAD, "--slo-tbt", "46ms", "--budgets", "512,1024",
         "--max-num-seqs", "auto", "--max-replays", "1", "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "recommendation.json").read_text())
    # the rule's values from the figures the sweep recorded: its plan's expected decode batch
    # and the engine's own limit
    expected = seqs_candidates(
        doc["candidates"]["decode_batch"], doc["engine"]["defaults"]["max_num_seqs"]
    )
    assert len(expected) >= 2 and doc["pairs"]["max_num_seqs"] == list(expected)
    assert doc["max_num_seqs"] in expected
    assert "auto: from half to four times the expected decode batch" in done.stderr
    assert json.loads((tmp_path / "run" / "sweep.json").read_text())["max_num_seqs"] == "auto"


@pytest.mark.timing  # two engines share the cores: the answer rests on 12+ ms of TBT margin
def test_parallel_slots_verify_pairs_side_by_side_and_resume_runs_only_what_is_missing(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    done = run(budgettune_cmd, "--parallel", "2", "-o", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "recommendation.json").read_text())
    assert (doc["budget"], doc["max_num_seqs"]) == (1024, 64)  # the grid's, as above
    assert doc["pairs"]["launches"] <= 6
    points = [
        json.loads(line)
        for folder in (tmp_path / "run").glob("seqs-*")
        for line in (folder / "points.jsonl").read_text().splitlines()
    ]
    # both slots ran pairs, each at its own max-num-seqs
    assert {p["slot"] for p in points} == {0, 1}, [(p["budget"], p["slot"]) for p in points]
    assert all(p["engine"]["max_num_seqs"] in (4, 16, 64) for p in points)

    # As if stopped before its last point: --resume runs that pair alone, and answers the same.
    at_64 = tmp_path / "run" / "seqs-64" / "points.jsonl"
    kept = at_64.read_text().splitlines()
    lost = json.loads(kept[-1])
    at_64.write_text("".join(line + "\n" for line in kept[:-1]))
    (tmp_path / "run" / "recommendation.json").unlink()
    # unfinished: the report names the pairs it holds, and --resume counts them
    page = subprocess.run(
        [*budgettune_cmd, "report", str(tmp_path / "run"), "-o", str(tmp_path / "p.html")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert page.returncode == 2
    assert f"has finished {len(points) - 1} pair(s)" in " ".join(page.stderr.split())
    resumed = subprocess.run(
        [*budgettune_cmd, "sweep", "--resume", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    said = " ".join((resumed.stdout + resumed.stderr).split())
    assert f"{len(points) - 1} pair(s) (budget with max-num-seqs) already measured" in said
    again = json.loads((tmp_path / "run" / "recommendation.json").read_text())
    assert (again["budget"], again["max_num_seqs"]) == (1024, 64)
    assert again["pairs"]["launches"] == 1, again["pairs"]["entries"]
    rerun = [json.loads(line) for line in at_64.read_text().splitlines()][-1]
    assert rerun["budget"] == lost["budget"] and len(at_64.read_text().splitlines()) == len(kept)


def test_goodput_chooses_the_pair_that_sustains_the_highest_rate(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    done = subprocess.run(
        # one budget, two values, both measured: two pairs that meet both SLOs to choose from
        [*budgettune_cmd, "sweep", *WORKLOAD, "--slo-tbt", "46ms", "--budgets", "1024",
         "--max-num-seqs", "16,64", "--exhaustive", "--goodput", "--max-replays", "1",
         "--requests", "30",  # each rate probe a short replay: the choice, not the figure
         "-o", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "recommendation.json").read_text())
    entries = doc["pairs"]["entries"]
    # every pair that met both SLOs at the sweep's rate got its highest rate, and only those
    rated = {(e["budget"], e["max_num_seqs"]): e["goodput_per_s"] for e in entries if e["ok"]}
    assert len(rated) >= 2 and all(rate is not None for rate in rated.values()), entries
    assert all(e["goodput_per_s"] is None for e in entries if not e["ok"])
    best = max(rated, key=lambda pair: (rated[pair], *pair))
    assert (doc["budget"], doc["max_num_seqs"]) == best, rated
    text = " ".join(done.stdout.split())
    assert f"Recommended: budget {best[0]} with max-num-seqs {best[1]}: the highest goodput" in text
    assert (tmp_path / "run" / f"seqs-{best[1]}" / f"engine-{best[0]}-goodput.log").is_file()
