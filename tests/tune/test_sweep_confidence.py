"""Issue 14 on the embedded engine, through the installed command: a budget whose SLO is set at
its own measured p99 is called marginal and replayed again with fresh arrivals (the replays
pooled), a budget far from its SLO is called clear after one replay, and the verdict says the
answer rests on a marginal pass and names the budget below that passed clearly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# The chat trace's lengths with Poisson arrivals (seed 0): the sweep's first replay of a budget
# sends exactly the schedule `replay` sent. At 14 req/s on the analytic 8B/H100 model, 768 tokens
# read a p99 TBT of 20.0 ms and 256 read 11.2 ms (`replay`, 2026-12-06; at 7 req/s 18.7 and
# 10.6 ms, each replay 15 s against 11 s at 14).
TRAFFIC = [
    "--engine", "sim", "--trace", "traces/chat.jsonl", "--arrivals", "poisson", "--rate", "14",
    "--requests", "60", "--seed", "0",
]  # fmt: skip
EDGE, FAR = 768, 256
REPO = Path(__file__).resolve().parents[2]


def run(cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=400, cwd=REPO)


@pytest.mark.timing  # an SLO at a measured p99
def test_slo_at_own_p99_is_marginal_and_replayed_far_budget_is_clear(
    budgettune_cmd: list[str], tmp_path: Path
) -> None:
    # The edge budget's own p99 TBT, measured by `replay` on the same schedule.
    replayed = run(budgettune_cmd, "replay", *TRAFFIC, "--budget", str(EDGE), "--json",
                   "-o", str(tmp_path / "replay"))  # fmt: skip
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    own_p99_ms = json.loads(replayed.stdout)["tbt_ms"]["p99"]

    run_dir = tmp_path / "sweep"
    swept = run(
        budgettune_cmd, "sweep", *TRAFFIC, "--budgets", f"{FAR},{EDGE}", "--baseline", "none",
        "--slo-tbt", f"{own_p99_ms}ms", "--slo-ttft", "10s", "--max-replays", "2",
        "-o", str(run_dir),
    )  # fmt: skip
    assert swept.returncode in (0, 3), swept.stderr[-3000:]
    doc = json.loads((run_dir / "recommendation.json").read_text())
    points = {p["budget"]: p for p in doc["points"]}

    edge = points[EDGE]
    assert edge["confidence"] == "marginal", edge["measured"]
    # Replayed twice and both pooled, unless the load generator lagged in one of them (a timer
    # waking late on a busy machine): that one is set aside, said in its warnings.
    set_aside = {w.split(" set aside: ")[0] for w in edge["client_warnings"] if " set aside: " in w}
    assert edge["replays"] == 2 - len(set_aside), edge["client_warnings"]
    low, high = edge["measured"]["tbt_at_slo_ci_ms"]
    assert low <= own_p99_ms <= high  # the SLO lies inside the interval: why it is marginal
    assert low <= edge["measured"]["tbt_at_slo_ms"] == edge["tbt_ms"] <= high
    folder = run_dir / f"budget-{EDGE}"
    replays = {str(folder / "results.json"), str(folder / "replay-2" / "results.json")}
    assert {edge["results_file"], *edge["replay_files"]} == replays
    assert all(Path(f).is_file() for f in replays)
    err = " ".join(swept.stderr.split())
    assert f"budget {EDGE}: " in err and "replaying with fresh arrivals" in err
    if "replay 1" in set_aside:
        # The first replay was set aside (in a CI run the machine's speed moved x1.53 during
        # it), so it may have read clear of the SLO: it was replayed for the client's health.
        assert "the load generator was unhealthy" in err, err
    else:
        assert f"budget {EDGE}: marginal: p99 TBT" in err, err

    far = points[FAR]
    assert far["confidence"] == "clear" and far["ok"] is True
    low, high = far["measured"]["tbt_at_slo_ci_ms"]
    assert low <= far["measured"]["tbt_at_slo_ms"] <= high < own_p99_ms
    # One replay, unless the load generator itself was unhealthy (a busy machine): then it is
    # replayed for that reason, said in its warnings.
    assert far["replays"] == 1 or far["client_warnings"], far
    ttft_low, ttft_high = far["measured"]["ttft_at_slo_ci_ms"]
    assert ttft_low <= far["measured"]["ttft_at_slo_ms"] <= ttft_high

    out = " ".join(swept.stdout.split())
    if doc["budget"] == EDGE:  # the edge passed (marginally): the verdict says so
        after = " after 2 replays" if edge["replays"] == 2 else ":"
        assert f"The pass at {EDGE} is marginal{after}" in out
        assert f"{FAR} passed clearly" in out
    else:  # it failed (marginally): the answer is the clear pass below
        assert doc["budget"] == FAR and points[FAR]["confidence"] == "clear"
    # the results.json of the sweep keeps the intervals in each point's "measured"
    results = json.loads((run_dir / "results.json").read_text())
    flat = {p["budget"]: p for p in results["points"]}
    assert flat[EDGE]["measured"]["tbt_at_slo_ci_ms"] == edge["measured"]["tbt_at_slo_ci_ms"]
    assert flat[EDGE]["confidence"] == "marginal"


# The sweep's CLI with the load generator's health check reporting the first replay it judges
# as unhealthy and every later one as healthy: a lagging client cannot be made to order on a
# shared machine (nor a healthy one: this machine's timers wake 5-10 ms late at times), so the
# health verdict is the one thing injected (the engine, the client and the files are real).
UNHEALTHY_FIRST_REPLAY = """
import sys
from budgettune.cli import main
from budgettune.loadgen.selfcheck import SelfCheck

first = []

def health_warnings(self):
    first.append(first[0] if first else self.duration_s)
    return ("requests went out late (injected)",) if self.duration_s == first[0] else ()

SelfCheck.health_warnings = health_warnings
sys.argv = ["budgettune", *sys.argv[1:]]
main()
"""


def sweep_unhealthy_first(
    tmp_path: Path, slo_tbt: str
) -> tuple[subprocess.CompletedProcess[str], Path, dict]:
    """A sweep of FAR alone (at most 2 replays) whose first replay's client is called unhealthy:
    the process, its run folder and the one point."""
    script = tmp_path / "unhealthy.py"
    script.write_text(UNHEALTHY_FIRST_REPLAY)
    run_dir = tmp_path / "sweep"
    swept = run(
        [sys.executable, str(script)], "sweep", *TRAFFIC, "--budgets", str(FAR),
        "--baseline", "none", "--slo-tbt", slo_tbt, "--slo-ttft", "10s", "--max-replays", "2",
        "-o", str(run_dir),
    )  # fmt: skip
    assert (run_dir / "recommendation.json").is_file(), swept.stderr[-3000:]
    (point,) = json.loads((run_dir / "recommendation.json").read_text())["points"]
    return swept, run_dir, point


def test_a_replay_under_an_unhealthy_client_is_set_aside_and_kept(tmp_path: Path) -> None:
    swept, run_dir, point = sweep_unhealthy_first(tmp_path, "100ms")
    assert swept.returncode == 0, swept.stderr[-3000:]
    first = run_dir / f"budget-{FAR}" / "results.json"
    second = run_dir / f"budget-{FAR}" / "replay-2" / "results.json"
    # the figures pool only the healthy replay; the one set aside keeps its file and warning
    assert point["replays"] == 1 and point["confidence"] == "clear"
    assert point["results_file"] == str(second) and point["replay_files"] == [str(first)]
    assert point["client_warnings"][0] == "replay 1 set aside: requests went out late (injected)"
    kept = json.loads(second.read_text())["points"][0]
    assert point["selfcheck"]["send_lag_ms"] == kept["selfcheck"]["send_lag_ms"]
    assert point["tbt_ms"] == pytest.approx(kept["tbt_ms"]["p99"], rel=1e-6)
    err = " ".join(swept.stderr.split())
    assert f"budget {FAR}: " in err and "the load generator was unhealthy" in err


def test_a_replay_repeating_one_set_aside_may_stop_early(tmp_path: Path) -> None:
    # 256 tokens measure about 9 ms against a 3 ms SLO: a clear fail, certain early in a replay.
    swept, run_dir, point = sweep_unhealthy_first(tmp_path, "3ms")
    assert swept.returncode == 3, swept.stderr[-3000:]  # no budget meets the SLOs
    assert point["client_warnings"][0] == "replay 1 set aside: requests went out late (injected)"
    assert point["results_file"] == str(run_dir / f"budget-{FAR}" / "replay-2" / "results.json")
    # the replay the point rests on stopped at its certain failure, as a first replay does
    assert point["tbt_ok"] is False and point["confidence"] == "clear"
    assert point["early_stop"] and point["early_stop"].startswith("early stop:")
