"""The hostile inputs of the commands that read files: `trace synth`, `trace inspect` and
`report` (see :mod:`hostile_cases` for what a case is)."""

from __future__ import annotations

from hostile_cases import (
    BINARY,
    DEEP,
    DEEP_OBJECT,
    GIB,
    GOOD_TRACE,
    TRACE_LINE,
    Case,
    Content,
    Fifo,
    Kind,
    Patch,
    Sparse,
    _c,
    _json_source_cases,
    _line,
)

CASES: list[Case] = []
_NONE: frozenset[str] = frozenset()
_TRACE = frozenset({"trace"})

# --- trace synth and inspect -----------------------------------------------------------------
SYN = ("trace", "synth")
CASES += [
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "99999999999",
        "-o",
        "{d}/t.jsonl",
        says="--requests",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--duration",
        "1e9h",
        "-o",
        "{d}/t.jsonl",
        says="--duration",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "1e300",
        "--duration",
        "1s",
        "-o",
        "{d}/t.jsonl",
        says="--rate",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--duration",
        "10",
        "-o",
        "{d}/t.jsonl",
        says="--duration",
    ),
    _c("trace synth", *SYN, "--rate", "0", "--requests", "5", "-o", "{d}/t.jsonl", says="--rate"),
    _c("trace synth", *SYN, "--rate", "4", "-o", "{d}/t.jsonl", says="--requests"),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "--prefix-groups",
        "-1",
        "-o",
        "{d}/t.jsonl",
        says="--prefix-groups",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "--prefix-groups",
        "99999999999999999999",
        "--prefix-tokens",
        "10",
        "-o",
        "{d}/t.jsonl",
        says="--prefix-groups",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "--prefix-groups",
        "2",
        "--prefix-tokens",
        "99999999999",
        "-o",
        "{d}/t.jsonl",
        says="--prefix-tokens",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "--prefix-tokens",
        "abc",
        "-o",
        "{d}/t.jsonl",
        says="--prefix-tokens",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "-o",
        "{d}/mine.jsonl",
        files=(("mine.jsonl", b"my own notes\n"),),
        says="mine.jsonl",
    ),
    _c("trace synth", *SYN, "--rate", "4", "--requests", "5", "-o", "{d}", says="-o"),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "-o",
        "/proc/budgettune-x/t.jsonl",
        says="/proc",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "--arrivals",
        "banana",
        "-o",
        "{d}/t.jsonl",
        says="--arrivals",
    ),
    _c(
        "trace synth",
        *SYN,
        "--rate",
        "4",
        "--requests",
        "5",
        "--burstiness",
        "-1",
        "--arrivals",
        "gamma",
        "-o",
        "{d}/t.jsonl",
        says="--burstiness",
    ),
]
INS = ("trace", "inspect")


def _inspect(name: str, content: Content, says: str = "", *extra: str, **kw: object) -> Case:
    return Case(
        "trace inspect",
        (*INS, f"{{d}}/{name}", *extra),
        files=((name, content),),
        says=says or name,
        **kw,
    )  # type: ignore[arg-type]


CSV_HEAD = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
CASES += [
    _inspect("deep.jsonl", DEEP),
    _inspect("deep-line2.jsonl", TRACE_LINE + DEEP_OBJECT + b"\n", "deep-line2.jsonl:2"),
    _inspect("binary.jsonl", BINARY),
    _inspect("binary.csv", CSV_HEAD + BINARY),
    _inspect("sparse.jsonl", Sparse(2 * GIB)),
    _inspect("sparse2.jsonl", Sparse(2 * GIB), "sparse2.jsonl", "--format", "budgettune"),
    _inspect("sparse3.json", Sparse(2 * GIB), "sparse3.json", "--format", "vllm-bench"),
    _inspect("sparse4.csv", Sparse(2 * GIB), "sparse4.csv", "--format", "azure"),
    _inspect("longline.jsonl", TRACE_LINE + b"7" * (40 << 20) + b"\n", "longline.jsonl:2"),
    _inspect("longhead.csv", b"x" * 262_144 + b",y\n1,2\n", "longhead.csv"),
    _inspect(
        "nan.jsonl",
        _line('{"arrival_s": NaN, "prompt_tokens": 5, "output_tokens": 5}'),
        "nan.jsonl:1",
    ),
    _inspect(
        "inf.jsonl",
        _line('{"arrival_s": 0, "prompt_tokens": Infinity, "output_tokens": 5}'),
        "inf.jsonl:1",
    ),
    _inspect("bool.jsonl", _line('{"prompt_tokens": true, "output_tokens": 5}'), "bool.jsonl:1"),
    _inspect(
        "boolout.jsonl", _line('{"prompt_tokens": 5, "output_tokens": false}'), "boolout.jsonl:1"
    ),
    _inspect("big.jsonl", _line('{"prompt_tokens": 1e400, "output_tokens": 5}'), "big.jsonl:1"),
    _inspect(
        "huge.jsonl",
        _line('{"prompt_tokens": 99999999999999999999999, "output_tokens": 5}'),
        "huge.jsonl:1",
    ),
    _inspect("str.jsonl", _line('{"prompt_tokens": "12", "output_tokens": 5}'), "str.jsonl:1"),
    _inspect("neg.jsonl", _line('{"prompt_tokens": -12, "output_tokens": 5}'), "neg.jsonl:1"),
    _inspect("list.jsonl", _line("[1, 2]"), "list.jsonl:1"),
    _inspect(
        "nested.jsonl", _line('{"prompt_tokens": [[[1]]], "output_tokens": 5}'), "nested.jsonl:1"
    ),
    _inspect(
        "arrnan.jsonl",
        TRACE_LINE + _line('{"arrival_s": "x", "prompt_tokens": 5, "output_tokens": 5}'),
        "arrnan.jsonl:2",
    ),
    _inspect("bench.json", b'{"input_lens": [1, 2], "output_lens": [1]}', "output_lens"),
    _inspect("benchdeep.json", b'{"input_lens": ' + DEEP + b"]", "benchdeep.json"),
    _inspect("benchnan.json", b'{"input_lens": [NaN], "output_lens": [1]}', "benchnan.json"),
    _inspect(
        "mooncake.jsonl",
        _line('{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": "x"}'),
        "mooncake.jsonl:1",
    ),
    _inspect(
        "mooncake2.jsonl",
        _line(
            '{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [[1], {"a": 2}]}'
        ),
        "mooncake2.jsonl:1",
    ),
    # more 512-token blocks than the prompt fills (round 3, class 7)
    _inspect(
        "mooncake3.jsonl",
        _line(
            '{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": ['
            + ", ".join(str(i) for i in range(100))
            + "]}"
        ),
        "mooncake3.jsonl:1: field 'hash_ids': 100 blocks of 512 tokens (51,200 tokens)",
    ),
    _inspect("azure.csv", CSV_HEAD + b"2023-11-16 18:15:46.6805900,abc,5\n", "azure.csv:2"),
    _inspect("azure2.csv", CSV_HEAD + b"2023-11-16 18:15:46.6805900,1,2,3\n", "azure2.csv:2"),
    _inspect("azure3.csv", CSV_HEAD + b"not a time,1,2\n", "azure3.csv:2"),
    _inspect("azure4.csv", CSV_HEAD + b"2023-11-16 18:15:46.6805900,1e400,2\n", "azure4.csv:2"),
    _inspect(
        "azure5.csv",
        CSV_HEAD + b"2023-11-16 18:15:46.6805900,99999999999999999999999,2\n",
        "azure5.csv:2",
    ),
    _inspect("gz.jsonl", b"\x1f\x8b\x08\x00garbage", "gz.jsonl"),
    _inspect("bom.csv", b"\xef\xbb\xbf" + b"\xff\xfe,a\n1,2\n", "bom.csv"),
    _inspect("nul.csv", b"a\x00,b\n1,2\n", "nul.csv"),
    _c("trace inspect", *INS, "{d}/none.jsonl", says="none.jsonl"),
    _c("trace inspect", *INS, "{d}", says="directory"),
    _c("trace inspect", *INS, "/dev/null", says="empty"),
    _c(
        "trace inspect",
        *INS,
        "{trace}",
        "--max-model-len",
        "0",
        needs=_TRACE,
        says="--max-model-len",
    ),
    _c("trace inspect", *INS, "{trace}", "--columns", "prompt=a", needs=_TRACE, says="--columns"),
    _c("trace inspect", *INS, "{trace}", "--format", "banana", needs=_TRACE, says="--format"),
    _c(
        "trace inspect",
        *INS,
        "/dev/stdin",
        stdin=GOOD_TRACE[:-1] + b"\nnot json\n",
        kind=Kind.PROCESS,
        says="/dev/stdin:13",
    ),
    _c(
        "trace inspect",
        *INS,
        "{d}/fifo.jsonl",
        files=(("fifo.jsonl", Fifo(b"{\n")),),
        kind=Kind.PROCESS,
        says="fifo.jsonl",
    ),
    # a device is no pipe, and endless zeros are refused at once, not copied to 1 GiB first
    _c("trace inspect", *INS, "/dev/zero", says="/dev/zero: holds binary data (NUL bytes)"),
    _c("trace inspect", *INS, "/dev/zero", "--format", "budgettune", says="binary data"),
    # one JSON line longer than format detection's 64 KiB head: judged whole, or refused as
    # the line readers refuse it ("JSON that is not a known trace format" was said of both)
    _c(
        "trace inspect",
        *INS,
        "{d}/long.json",
        files=(("long.json", b'{"note": "' + b"x" * (5 << 20) + b'"}'),),
        says="long.json:1: a line longer than 4 MiB",
    ),
    _c(
        "trace inspect",
        *INS,
        "{d}/wide.json",
        files=(("wide.json", b'{"note": "' + b"x" * (100 << 10) + b'", "id": 1}\n'),),
        says="cannot tell the format from a JSON line with keys note, id",
    ),
]

# --- report ----------------------------------------------------------------------------------
_RESULTS = frozenset({"results"})
CASES += _json_source_cases("report", ("report",))
CASES += [
    _c("report", "report", "{d}/missing.json", says="missing.json"),
    _c("report", "report", "{d}", says="results"),
    _c(
        "report",
        "report",
        "{d}/kind.json",
        files=(
            ("kind.json", b'{"schema_version": 1, "kind": "banana", "config": {}, "points": []}'),
        ),
        says="kind",
    ),
    _c(
        "report",
        "report",
        "{d}/points.json",
        files=(
            (
                "points.json",
                b'{"schema_version": 1, "kind": "replay", "config": {}, "points": "x"}',
            ),
        ),
        says="points",
    ),
    _c(
        "report",
        "report",
        "{d}/pt.json",
        files=(
            (
                "pt.json",
                b'{"schema_version": 1, '
                b'"kind": "replay", "config": {}, "points": [{"records": "x"}]}',
            ),
        ),
        says="pt.json",
    ),
    _c(
        "report",
        "report",
        "{d}/pt2.json",
        files=(
            (
                "pt2.json",
                b'{"schema_version": 1, '
                b'"kind": "replay", "config": {}, "points": [{"records": [{"sent_s": "x"}]}]}',
            ),
        ),
        says="pt2.json",
    ),
    _c(
        "report",
        "report",
        "{d}/schema.json",
        files=(
            (
                "schema.json",
                b'{"schema_version": 99, "kind": "replay", "config": {}, "points": []}',
            ),
        ),
        says="schema_version",
    ),
    _c(
        "report",
        "report",
        "{d}/schemas.json",
        files=(
            (
                "schemas.json",
                b'{"schema_version": "1", "kind": "replay", "config": {}, "points": []}',
            ),
        ),
        says="schema_version",
    ),
    _c("report", "report", "{d}/t.jsonl", files=(("t.jsonl", GOOD_TRACE),), says="t.jsonl"),
    _c("report", "report", "{results}", "--with", "{results}", needs=_RESULTS, says="--with"),
    _c("report", "report", "{profile}", "--with", "{results}", needs=_RESULTS, says="--with"),
    _c(
        "report",
        "report",
        "{profile}",
        "--with",
        "{d}/bin.json",
        files=(("bin.json", BINARY),),
        says="--with",
    ),
    _c(
        "report",
        "report",
        "{profile}",
        "--with",
        "{d}/deep.json",
        files=(("deep.json", DEEP),),
        says="--with",
    ),
    _c("report", "report", "{profile}", "--with", "{d}/none.json", says="--with"),
    _c("report", "report", "{results}", "--slo-tbt", "50", needs=_RESULTS, says="50ms"),
    _c("report", "report", "{results}", "--slo-ttft", "1e400s", needs=_RESULTS, says="--slo-ttft"),
    _c("report", "report", "{results}", "--percentile", "200", needs=_RESULTS, says="--percentile"),
    _c("report", "report", "{results}", "--percentile", "nan", needs=_RESULTS, says="--percentile"),
    _c(
        "report",
        "report",
        "{results}",
        "-o",
        "{d}/mine.html",
        files=(("mine.html", b"<html>my page</html>"),),
        needs=_RESULTS,
        says="mine.html",
    ),
    _c(
        "report",
        "report",
        "{results}",
        "-o",
        "/proc/budgettune-x/r.html",
        needs=_RESULTS,
        says="/proc",
    ),
    # documents read back, every field checked (round 3, class 1)
    *(
        _c(
            "report",
            "report",
            "{run}",
            "-o",
            "{d}/x.html",
            files=(("run/recommendation.json", Patch(key, value)),),
            needs=frozenset({"run"}),
            says=says,
        )
        for key, value, says in (
            ("choice.reasons", "5", "field 'choice.reasons'"),
            ("choice.reasons", '"Hello"', "field 'choice.reasons'"),
            ("candidates.budgets", '["abc"]', "field 'candidates.budgets'"),
            ("candidates.budgets", "5", "field 'candidates.budgets'"),
            ("command", "7", "field 'command'"),
            ("slo.percentile", "250", "field 'slo.percentile'"),
        )
    ),
    *(
        _c(
            "report",
            "report",
            "{d}/profile.json",
            "-o",
            "{d}/x.html",
            files=(("profile.json", Patch(key, value, shipped_profile=True)),),
            says=says,
        )
        for key, value, says in (
            ("step.sharpness", "-1", "step.sharpness"),
            ("step.sharpness", "1e308", "step.sharpness"),
            ("probes.0.prompt_tokens", "0", "prompt_tokens"),
            ("ridge.knee_tokens", "-100", "ridge.knee_tokens"),
            ("step.comm_fixed_s", "-1", "step.comm_fixed_s"),
            ("step.unsplit_per_token_s", "-0.5", "step.unsplit_per_token_s"),
            ("step.flops_per_s", "1e308", "step.flops_per_s"),
        )
    ),
    _c(
        "report",
        "report",
        "{run}",
        "-o",
        "{d}/x.html",
        files=(("run/recommendation.json", DEEP),),
        needs=frozenset({"run"}),
        says="recommendation.json",
    ),
    _c(
        "report",
        "report",
        "{run}",
        "-o",
        "{d}/x.html",
        files=(("run/recommendation.json", BINARY),),
        needs=frozenset({"run"}),
        says="recommendation.json",
    ),
]
