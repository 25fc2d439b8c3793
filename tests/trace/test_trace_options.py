"""The shared traffic options work in any typer command: a command declared here with the
group of them (one TrafficRequest parameter) turns command-line values into a schedule through
build_traffic."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer
from typer.testing import CliRunner

from budgettune.app.requests import TrafficRequest
from budgettune.app.traffic import build_traffic
from budgettune.cli import _trace_options as opt
from budgettune.cli._groups import with_groups
from budgettune.trace.load import load_trace
from budgettune.trace.schema import Trace, TraceRequest

demo = typer.Typer()


@demo.command()
@with_groups(traffic=opt.TRAFFIC)
def run(traffic: TrafficRequest = opt.DEFAULTS) -> None:
    built = build_traffic(traffic)
    schedule = built.schedule
    print(
        json.dumps(
            {
                "n": len(schedule),
                "t": schedule.target_s.tolist(),
                "p": schedule.prompt_tokens.tolist(),
                "desc": built.description,
            }
        )
    )


def invoke(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(demo, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_options_replay_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("ts,in,out\r\n0,10,1\r\n1,20,2\r\n2,30,3\r\n4,40,4\r\n")  # CRLF line ends
    out = invoke(
        "--trace",
        str(path),
        "--columns",
        "arrival=ts,prompt=in,output=out",
        "--time-scale",
        "2",
        "--window",
        "1s:5s",
        "--max-model-len",
        "33",
        "--on-long",
        "drop",
    )
    assert out["p"] == [20, 30]  # 40 + 4 > 33 dropped; the window starts at 1 s
    assert out["t"] == [0.0, 0.5]
    assert "recorded x2" in str(out["desc"])


def test_options_synthetic_and_poisson(tmp_path: Path) -> None:
    out = invoke("--rate", "5", "--requests", "50", "--prompt-dist", "fixed:64", "--seed", "2")
    assert out["n"] == 50 and set(out["p"]) == {64}
    path = tmp_path / "l.jsonl"
    path.write_text(
        '{"prompt_tokens": 7, "output_tokens": 1}\n{"prompt_tokens": 9, "output_tokens": 2}\n'
    )
    out = invoke("--trace", str(path), "--rate", "100", "--duration", "2s")
    assert 150 < out["n"] < 250
    assert set(out["p"]) == {7, 9}


def test_option_errors_exit_2_through_the_app(tmp_path: Path) -> None:
    from budgettune.cli import app

    # the real app turns SpecError into one line and exit code 2 for any command using these
    result = CliRunner().invoke(
        app, ["trace", "inspect", str(tmp_path / "x.csv"), "--on-long", "cut"]
    )
    assert result.exit_code == 2


def test_crlf_and_from_requests_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_bytes(
        b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
        b"2023-11-16 18:15:46.5,374,44\r\n2023-11-16 18:15:47.0,396,109\r\n"
    )
    trace, _ = load_trace(path)
    expected = Trace.from_requests(
        [TraceRequest(374, 44, arrival_s=0.0), TraceRequest(396, 109, arrival_s=0.5)]
    )
    np.testing.assert_array_equal(trace.prompt_tokens, expected.prompt_tokens)
    np.testing.assert_array_equal(trace.arrival_s, expected.arrival_s)
    assert list(trace) == list(expected)
