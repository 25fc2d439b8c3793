"""Synthetic traces and the shared traffic options used by simulate/replay/sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from budgettune.app.requests import TrafficRequest
from budgettune.app.traffic import Traffic, build_traffic
from budgettune.cli import app
from budgettune.core.errors import SpecError
from budgettune.trace.dists import parse_length_dist
from budgettune.trace.load import load_trace
from budgettune.trace.schedule import synthetic_schedule
from budgettune.trace.synth import jsonl_lines, synthesize

PROMPT = "lognormal:mean=1000,sigma=1.0,max=8192"
OUTPUT = "lognormal:mean=250"


def test_synth_matches_synthetic_schedule_for_the_same_seed() -> None:
    prompt, output = parse_length_dist(PROMPT), parse_length_dist(OUTPUT, field="output_dist")
    trace = synthesize(prompt_dist=prompt, output_dist=output, rate_per_s=16, requests=300, seed=5)
    schedule = synthetic_schedule(
        prompt_dist=prompt, output_dist=output, rate_per_s=16, requests=300, seed=5
    )
    np.testing.assert_array_equal(trace.arrival_s, schedule.target_s)
    np.testing.assert_array_equal(trace.prompt_tokens, schedule.prompt_tokens)
    np.testing.assert_array_equal(trace.output_tokens, schedule.output_tokens)


def test_synth_cli_writes_a_trace_that_reads_back(tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    args = ["trace", "synth", "--prompt-dist", PROMPT, "--output-dist", OUTPUT, "--rate", "16"]
    args += ["--requests", "2000", "--seed", "0", "-o", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "wrote 2,000 requests" in result.output
    trace, report = load_trace(out)
    assert report.format == "budgettune" and len(trace) == 2000
    expected = synthesize(
        prompt_dist=parse_length_dist(PROMPT),
        output_dist=parse_length_dist(OUTPUT),
        rate_per_s=16,
        requests=2000,
        seed=0,
    )
    np.testing.assert_array_equal(trace.prompt_tokens, expected.prompt_tokens)
    np.testing.assert_allclose(trace.arrival_s, expected.arrival_s, atol=1e-6)
    assert trace.prompt_tokens.max() <= 8192
    # a second run with the same seed writes the same bytes
    again = tmp_path / "y.jsonl"
    assert CliRunner().invoke(app, [*args[:-1], str(again)]).exit_code == 0
    assert again.read_bytes() == out.read_bytes()


def test_synth_gamma_duration_and_prefix_groups() -> None:
    trace = synthesize(
        prompt_dist=parse_length_dist("uniform:min=100,max=900"),
        output_dist=parse_length_dist("fixed:8"),
        rate_per_s=40,
        duration_s=100.0,
        arrivals="gamma",
        burstiness=0.5,
        prefix_groups=3,
        prefix_tokens=256,
        seed=1,
    )
    assert trace.arrival_s is not None and trace.arrival_s[-1] < 100.0
    assert len(trace) == pytest.approx(4000, rel=0.1)
    gaps = np.diff(trace.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(np.sqrt(2), rel=0.1)
    assert set(trace.prefix_group.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(trace.prefix_tokens, np.minimum(trace.prompt_tokens, 256))
    line = next(jsonl_lines(trace))
    assert '"prefix_group"' in line and '"prefix_tokens"' in line


def test_synth_errors(tmp_path: Path) -> None:
    dist = parse_length_dist("fixed:8")
    with pytest.raises(SpecError, match="give both --prefix-groups and --prefix-tokens") as caught:
        synthesize(prompt_dist=dist, output_dist=dist, rate_per_s=1, requests=5, prefix_groups=2)
    assert caught.value.field == "prefix_tokens"  # the one missing
    with pytest.raises(SpecError, match="requests: give at least one of --requests and --dur"):
        synthesize(prompt_dist=dist, output_dist=dist, rate_per_s=1)
    result = CliRunner().invoke(
        app, ["trace", "synth", "--rate", "1", "-o", "/nonexistent/dir/x.jsonl", "--requests", "3"]
    )
    assert result.exit_code == 2 and "cannot write" in result.output
    assert not Path("/nonexistent").exists()  # no folder made for a file's path
    (tmp_path / "file").write_text("mine")
    result = CliRunner().invoke(
        app, ["trace", "synth", "--rate", "1", "-o", str(tmp_path / "file"), "--requests", "3"]
    )
    assert result.exit_code == 2 and "budgettune did not write it" in result.output
    assert (tmp_path / "file").read_text() == "mine"
    result = CliRunner().invoke(
        app, ["trace", "synth", "--rate", "1", "--requests", "3", "--burstiness", "0.5", "-o", "-"]
    )
    assert result.exit_code == 2
    assert "--burstiness: applies to --arrivals gamma only, not poisson" in result.output


def traffic_from_options(
    *, default_requests: int | None = None, on_warning: Any = None, **options: Any
) -> Traffic:
    """The traffic the options ask for, as a command builds it (request -> build_traffic)."""
    return build_traffic(
        TrafficRequest(**options), default_requests=default_requests, on_warning=on_warning
    )


def test_traffic_from_a_trace_with_options(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            f'{{"arrival_s": {i * 0.5}, "prompt_tokens": {100 + i}, "output_tokens": 5}}\n'
            for i in range(10)
        )
    )
    traffic = traffic_from_options(trace=path, time_scale=2.0, window=":3s", requests=4)
    assert traffic.report is not None and traffic.report.requests == 10
    np.testing.assert_array_equal(traffic.schedule.target_s, [0.0, 0.25, 0.5, 0.75])
    assert "recorded x2" in traffic.description
    # a rate search reuses the loaded trace: recorded times rescaled to the new mean rate
    assert traffic.at_rate(8.0).rate_per_s == pytest.approx(8.0)
    poisson = traffic_from_options(trace=path, arrivals="poisson", rate=3.0, duration="10s")
    assert poisson.schedule.target_s[-1] < 10.0
    assert set(poisson.schedule.prompt_tokens.tolist()) <= set(range(100, 110))
    clipped = traffic_from_options(trace=path, max_model_len="110", on_long="clip")
    assert clipped.report is not None and clipped.report.clipped == 4  # prompts 106..109 + 5
    # the prompts fit the context: kept whole, the outputs cut to what is left
    assert clipped.schedule.prompt_tokens.tolist() == list(range(100, 110))
    assert clipped.schedule.output_tokens.tolist() == [5] * 6 + [4, 3, 2, 1]


def test_traffic_without_a_trace_is_synthetic() -> None:
    traffic = traffic_from_options(rate=4.0, requests=100, seed=3, prompt_dist="fixed:64")
    assert traffic.report is None and len(traffic.schedule) == 100
    assert set(traffic.schedule.prompt_tokens.tolist()) == {64}
    faster = traffic.at_rate(8.0)
    np.testing.assert_allclose(faster.target_s, traffic.schedule.target_s / 2)
    assert traffic_from_options(rate=1.0, default_requests=7).schedule.target_s.shape == (7,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"requests": 10}, "rate: required for synthetic traffic"),
        ({"rate": 1.0, "requests": 5, "window": "0:5s"}, "window: applies to --trace only"),
        ({"rate": 1.0, "requests": 5, "arrivals": "recorded"}, "needs --trace"),
        ({"rate": 1.0, "requests": 5, "strict": True}, "strict: applies to --trace only"),
        ({"rate": -1.0, "requests": 5}, "rate: must be a positive number"),
        # slower than one request a week: it read as p50s of 0.0 ms
        ({"rate": 1e-300, "requests": 5}, r"rate: 1e-300 is less than budgettune takes \(at least"),
        ({"rate": 1.0, "duration": "soon"}, "duration"),
        ({"rate": 1.0, "requests": 5, "prompt_dist": "normal:1"}, "prompt_dist: unknown distrib"),
        # which one was meant is anyone's guess (the last one used to win)
        (
            {"rate": 1.0, "requests": 5, "prompt_dist": "lognormal:mean=1000,mean=5"},
            "mean given twice",
        ),
        # int() reads "1_6" as 16
        ({"rate": 1.0, "requests": 5, "output_dist": "fixed:1_6"}, "expected e.g. fixed:"),
    ],
)
def test_traffic_option_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        traffic_from_options(**kwargs)


def test_traffic_option_errors_with_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"prompt_tokens": 5, "output_tokens": 6}\n')
    with pytest.raises(SpecError, match="prompt_dist: not with --trace"):
        traffic_from_options(trace=path, rate=1.0, prompt_dist="fixed:5")
    with pytest.raises(SpecError, match="max_model_len"):
        traffic_from_options(trace=path, rate=1.0, max_model_len="lots")


def test_synthetic_traffic_fits_the_engine_context() -> None:
    warnings: list[str] = []
    common = {"rate": 10.0, "requests": 400, "seed": 1, "prompt_dist": "uniform:min=100,max=900"}
    clipped = traffic_from_options(
        **common, output_dist="fixed:200", max_model_len="800", on_warning=warnings.append
    )
    total = clipped.schedule.prompt_tokens + clipped.schedule.output_tokens
    assert len(clipped.schedule) == 400 and total.max() == 800
    assert warnings and warnings[0].startswith("clipped ") and "--max-model-len 800" in warnings[0]
    # the same clipping holds at another rate (a rate search rebuilds the traffic)
    again = clipped.at_rate(20.0)
    assert (again.prompt_tokens + again.output_tokens).max() <= 800
    dropped = traffic_from_options(
        **common, output_dist="fixed:200", max_model_len="800", on_long="drop"
    )
    kept = dropped.schedule.prompt_tokens + dropped.schedule.output_tokens
    assert kept.max() <= 800 and len(dropped.schedule) == 400 - int(warnings[0].split()[1])
