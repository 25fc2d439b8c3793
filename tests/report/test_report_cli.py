"""`budgettune report` through typer's CliRunner and the installed command: pages written, one-line
errors with exit code 2 for bad input, and a real replay on the embedded engine rebuilt into a
page from its results.json alone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from report_builders import SIM_DOC
from typer.testing import CliRunner

from budgettune.cli import app

runner = CliRunner()


def test_report_from_simulate_json(tmp_path: Path) -> None:
    source = tmp_path / "sim.json"
    source.write_text(json.dumps(SIM_DOC))
    out = tmp_path / "pages" / "sim.html"
    result = runner.invoke(
        app, ["report", str(source), "--slo-tbt", "50ms", "--slo-ttft", "1s", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "simulate" in result.output and str(out) in result.output.replace("\n", "")
    page = out.read_text()
    for chart_id in ("chart-tbt-vs-budget", "chart-ttft-vs-budget", "chart-throughput"):
        assert f'id="{chart_id}"' in page
    assert "Largest simulated budget meeting the SLOs at 16 requests/s: 1024" in page


def test_default_output_is_beside_the_source(tmp_path: Path) -> None:
    source = tmp_path / "sim.json"
    source.write_text(json.dumps(SIM_DOC))
    result = runner.invoke(app, ["report", str(source)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.json"], "no such file"),
        (["{bad}", "--slo-tbt", "50mss"], "--slo-tbt"),
        (["{bad}", "--percentile", "0"], "--percentile"),
        (["{bad}"], "bad.json: cannot tell what this file is"),
        (["{notjson}"], "not valid JSON"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path, budgettune_cmd: list[str], args: list[str], message: str
) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "notjson.json").write_text("{not json")
    argv = [a.format(bad=tmp_path / "bad.json", notjson=tmp_path / "notjson.json") for a in args]
    done = subprocess.run(
        [*budgettune_cmd, "report", *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) <= 2  # error + hint
    assert not (tmp_path / "report.html").exists()


@pytest.mark.slow
def test_real_replay_rebuilt_from_results(tmp_path: Path, budgettune_cmd: list[str]) -> None:
    run = tmp_path / "run"
    replay = subprocess.run(
        [
            *budgettune_cmd,
            "replay",
            "--engine",
            "sim",
            "--budget",
            "512",
            "--rate",
            "10",
            "--requests",
            "30",
            "--prompt-dist",
            "lognormal:mean=800,sigma=1.0,max=4096",
            "--output-dist",
            "lognormal:mean=40,sigma=0.5,max=120",
            "-o",
            str(run),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert replay.returncode == 0, replay.stderr[-2000:]
    done = subprocess.run(
        [*budgettune_cmd, "report", str(run), "--slo-tbt", "50ms", "--slo-ttft", "2s"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    page = (run / "report.html").read_text()
    results = json.loads((run / "results.json").read_text())
    point = results["points"][0]
    for chart_id in ("chart-tbt-cdf", "chart-ttft-cdf", "chart-workload-lengths", "chart-timeline"):
        assert f'id="{chart_id}"' in page
    # the verdict quotes the p99 TBT the replay itself recorded
    p99 = point["tbt_ms"]["p99"]
    shown = f"{p99:.3g} ms"
    assert f"p99 TBT {shown}" in page
    assert '<a href="results.json">' in page
    assert "budgettune replay --engine sim --budget 512" in page


def test_simulate_results_rebuilt_as_predictions(tmp_path: Path, budgettune_cmd: list[str]) -> None:
    run = tmp_path / "sim"
    done = subprocess.run(
        [*budgettune_cmd, "simulate", "--requests", "200", "--budgets", "512,2048", "-o", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (run / "report.html").unlink()
    done = subprocess.run(
        [*budgettune_cmd, "report", str(run), "--slo-tbt", "50ms", "--slo-ttft", "1s"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "report (simulate," in done.stdout
    page = (run / "report.html").read_text()
    assert "Every figure on this page is a simulator prediction" in page
    assert "One measurement" not in page  # not mistaken for a replay
    for chart_id in ("chart-tbt-vs-budget", "chart-tbt-cdf", "chart-ttft-cdf"):
        assert f'id="{chart_id}"' in page


def test_profile_into_an_existing_folder_writes_its_report(
    tmp_path: Path, budgettune_cmd: list[str]
) -> None:
    """`profile -o DIR`, like every other command's -o: the profile and report.html inside."""
    out = tmp_path / "prof"
    out.mkdir()
    args = ["profile", "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu", "h100-sxm"]
    done = subprocess.run(
        [*budgettune_cmd, *args, "-o", str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "llama-3.1-8b_h100-sxm.csv",
        "llama-3.1-8b_h100-sxm.json",
        "report.html",
    ]
    page = (out / "report.html").read_text()
    assert 'id="chart-profile"' in page and '<a href="llama-3.1-8b_h100-sxm.json">' in page


@pytest.mark.slow
def test_profiles_side_by_side_with_with(tmp_path: Path, budgettune_cmd: list[str]) -> None:
    """Issue 6: when two profiles of a model were measured (e.g. vLLM and torch), the report
    draws both curves: `profile -o ... --with OTHER` and `report PROFILE --with OTHER`."""

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*budgettune_cmd, *argv], capture_output=True, text=True, timeout=120)

    other, mine = tmp_path / "h100.json", tmp_path / "h200.json"
    analytic = ["profile", "--engine", "analytic", "--model", "llama-3.1-8b", "--gpu"]
    done = run(*analytic, "h100-sxm", "-o", str(other))
    assert done.returncode == 0, done.stderr[-2000:]
    done = run(*analytic, "h200", "-o", str(mine), "--with", str(other))
    assert done.returncode == 0, done.stderr[-2000:]
    page = (tmp_path / "h200.html").read_text()
    # Same engine on both, so each curve is told apart by its hardware, this profile first.
    assert page.index("analytic, h200 #1") < page.index("analytic, h100-sxm #2")
    rebuilt = run("report", str(other), "--with", str(mine))
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    page = (tmp_path / "report.html").read_text()
    assert page.index("analytic, h100-sxm #1") < page.index("analytic, h200 #2")
    # Mistakes: a missing --with file before measuring; --with on a source that is no profile.
    missing = run(*analytic, "h200", "--with", str(tmp_path / "nope.json"))
    assert (
        missing.returncode == 2
        and "--with: " in missing.stderr
        and "no such profile file" in missing.stderr
    )
    assert "Traceback" not in missing.stderr
    (tmp_path / "sim.json").write_text(json.dumps(SIM_DOC))
    wrong = run("report", str(tmp_path / "sim.json"), "--with", str(other))
    assert wrong.returncode == 2 and "--with: applies to a profile JSON source" in wrong.stderr
