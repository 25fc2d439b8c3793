"""The hostile inputs, one table for every command: what a careless or hostile user types, and
what budgettune must answer. Read by the table-driven tests beside this file (in-process, through
typer's CliRunner) and by ``scripts/hostile_pass.py`` (the installed command in a subprocess,
with a time and memory cap per case, and the faults).

A case's ``argv`` may name ``{d}`` (the case's own empty folder, where its ``files`` are
written), ``{trace}`` (a small valid trace), ``{run}`` (a copy of a finished sweep's run folder),
``{results}`` (a copy of a replay's results.json), ``{profile}`` (a shipped profile).
``expect`` is the exit code: 2 for a user's mistake, 1 for the environment. ``says`` is text
the error must hold (it names the option, the file or the line, and what was expected).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

USER = 2
ENV = 1


class Kind(IntEnum):
    """How a case runs: in-process and in a subprocess, or only in a subprocess (pipes,
    FIFOs, servers, anything a CliRunner cannot stand in for)."""

    ANY = 0
    PROCESS = 1


@dataclass(frozen=True, slots=True)
class Sparse:
    """A file of ``size`` zero bytes that takes no disk (``truncate -s``)."""

    size: int


@dataclass(frozen=True, slots=True)
class Fifo:
    """A named pipe that a writer fills with ``data`` once, then closes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Patch:
    """The fixture's JSON document (``sweep.json``) with ``key`` set to the JSON text ``value``
    (``None``: the key removed); a dotted key reaches inside (``options.NAME``,
    ``choice.reasons``, ``probes.0.prompt_tokens``). ``shipped_profile``: start from the
    shipped profile (the file is not in the fixture)."""

    key: str
    value: str | None
    shipped_profile: bool = False


@dataclass(frozen=True, slots=True)
class PatchLine:
    """The fixture's JSON Lines file (``points.jsonl``) with ``key`` of its first line set to
    the JSON text ``value``."""

    key: str
    value: str


Content = bytes | Sparse | Fifo | Patch | PatchLine


def _describe(content: object) -> str:
    if isinstance(content, Patch | PatchLine):
        return f"{content.key}={content.value}"
    if isinstance(content, Sparse):
        return f"{content.size >> 20} MiB of zeros"
    if isinstance(content, Fifo):
        return "fifo"
    assert isinstance(content, bytes)
    return repr(content[:24])[2:-1] + ("..." if len(content) > 24 else "")


@dataclass(frozen=True, slots=True)
class Case:
    command: str
    argv: tuple[str, ...]
    expect: int = USER
    says: str = ""
    files: tuple[tuple[str, Content], ...] = ()
    stdin: bytes | None = None
    kind: Kind = Kind.ANY
    needs: frozenset[str] = field(default_factory=frozenset)

    @property
    def id(self) -> str:
        """The argv after the command, and what its files hold ("sweep.json[schema_version=99]")."""
        words = self.command.split()
        text = " ".join(self.argv[len(words) :])
        for name, content in self.files:
            text += f" {name.split('/')[-1]}[{_describe(content)}]"
        return text[:120]


DEEP = b"[" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000
BINARY = bytes(range(256)) * 8  # 0x80-0xff: not UTF-8
TRACE_LINE = b'{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10}\n'
GOOD_TRACE = b"".join(
    b'{"arrival_s": %.2f, "prompt_tokens": %d, "output_tokens": %d}\n' % (i * 0.25, 50 + i, 8)
    for i in range(12)
)
GIB = 1 << 30


def _c(command: str, *argv: str, **kw: object) -> Case:
    return Case(command, tuple(argv), **kw)  # type: ignore[arg-type]


def _line(text: str) -> bytes:
    return text.encode() + b"\n"


# --- options every traffic-taking command shares (simulate runs them, cheapest) -------------
def _traffic_cases(cmd: str, head: tuple[str, ...], needs: frozenset[str]) -> list[Case]:
    def t(*argv: str, **kw: object) -> Case:
        return Case(cmd, (*head, *argv), needs=needs, **kw)  # type: ignore[arg-type]

    return [
        t("--rate", "0", says="--rate"),
        t("--rate", "-1", says="--rate"),
        t("--rate", "nan", says="--rate"),
        t("--rate", "inf", says="--rate"),
        t("--rate", "1e300", says="--rate"),
        t("--rate", "abc", says="--rate"),
        # int() and float() read these; a user who typed them meant something else
        t("--rate", "1_6", says="--rate: got '1_6': write a plain number"),
        t("--rate", "\uff11\uff16", says="--rate: got"),  # full-width "16"
        t("--requests", "2_0", says="--requests: got '2_0': write a plain whole number"),
        t("--requests", "0", says="--requests"),
        t("--requests", "-5", says="--requests"),
        t("--requests", "99999999999999", says="--requests"),
        t("--requests", "1e3", says="--requests"),
        t("--duration", "1e9h", says="--duration"),
        t("--duration", "50", says="--duration"),
        t("--duration", "-1s", says="--duration"),
        t("--duration", "nan", says="--duration"),
        t("--burstiness", "0", "--arrivals", "gamma", says="--burstiness"),
        t("--burstiness", "nan", "--arrivals", "gamma", says="--burstiness"),
        t("--burstiness", "inf", "--arrivals", "gamma", says="--burstiness"),
        t("--arrivals", "banana", says="--arrivals"),
        t("--seed", "-1", says="--seed"),
        t("--prompt-dist", "fixed:0", says="--prompt-dist"),
        t("--prompt-dist", "fixed:-3", says="--prompt-dist"),
        t("--prompt-dist", "fixed:99999999999999999999", says="--prompt-dist"),
        t("--prompt-dist", "lognormal:mean=1e300", says="--prompt-dist"),
        t("--prompt-dist", "lognormal:mean=x", says="--prompt-dist"),
        t("--prompt-dist", "uniform:min=9,max=1", says="--prompt-dist"),
        t("--prompt-dist", "banana:1", says="--prompt-dist"),
        t("--prompt-dist", "fixed:nan", says="--prompt-dist"),
        t("--output-dist", "fixed:inf", says="--output-dist"),
        t("--output-dist", "lognormal:mean=100,sigma=-1", says="--output-dist"),
        t("--trace", "{d}/missing.jsonl", says="missing.jsonl"),
        t("--trace", "{d}", says="directory"),
        t("--trace", "{d}/bin.jsonl", files=(("bin.jsonl", BINARY),), says="bin.jsonl"),
        t("--trace", "{d}/deep.jsonl", files=(("deep.jsonl", DEEP),), says="deep.jsonl"),
        t("--trace", "{d}/empty.jsonl", files=(("empty.jsonl", b""),), says="empty"),
        t(
            "--trace",
            "{d}/nan.jsonl",
            files=(
                ("nan.jsonl", _line('{"arrival_s": NaN, "prompt_tokens": 5, "output_tokens": 5}')),
            ),
            says="nan.jsonl:1",
        ),
        t(
            "--trace",
            "{d}/bool.jsonl",
            files=(("bool.jsonl", _line('{"prompt_tokens": true, "output_tokens": 5}')),),
            says="bool.jsonl:1",
        ),
        t("--window", "20m:10m", "--trace", "{trace}", says="--window"),
        t("--window", "10:20", "--trace", "{trace}", says="--window"),
        t("--window", "abc", "--trace", "{trace}", says="--window"),
        t("--time-scale", "0", "--trace", "{trace}", says="--time-scale"),
        t("--time-scale", "nan", "--trace", "{trace}", says="--time-scale"),
        t("--time-scale", "inf", "--trace", "{trace}", says="--time-scale"),
        t("--time-scale", "1e-300", "--trace", "{trace}", says="--time-scale: 1e-300 is less"),
        t("--burstiness", "1e-300", "--arrivals", "gamma", says="--burstiness: 1e-300 is less"),
        t(
            "--trace",
            "{d}/huge.jsonl",
            files=(("huge.jsonl", _line('{"prompt_tokens": 20000000, "output_tokens": 5}')),),
            says="huge.jsonl:1: field 'prompt_tokens': 20,000,000 tokens is more than",
        ),
        t("--max-model-len", "0", "--trace", "{trace}", says="--max-model-len"),
        t("--max-model-len", "abc", "--trace", "{trace}", says="--max-model-len"),
        t("--max-model-len", "99999999999999999999", "--trace", "{trace}", says="--max-model-len"),
        t("--on-long", "banana", "--trace", "{trace}", "--max-model-len", "60", says="--on-long"),
        t("--format", "banana", "--trace", "{trace}", says="--format"),
        t("--columns", "garbage", "--trace", "{trace}", says="--columns"),
    ]


_NONE: frozenset[str] = frozenset()
_TRACE = frozenset({"trace"})


def _json_source_cases(cmd: str, head: tuple[str, ...], tail: tuple[str, ...] = ()) -> list[Case]:
    """A JSON document where one is expected, in every bad shape."""

    def j(name: str, content: Content, says: str = "") -> Case:
        return Case(
            cmd, (*head, f"{{d}}/{name}", *tail), files=((name, content),), says=says or name
        )

    return [
        j("deep.json", DEEP),
        j("deep-object.json", DEEP_OBJECT),
        j("binary.json", BINARY),
        j("empty.json", b""),
        j("list.json", b"[1, 2, 3]\n"),
        j("nan.json", b'{"schema_version": NaN}\n'),
        j("text.json", b"hello\n"),
        j("sparse.json", Sparse(2 * GIB)),
        j("utf16.json", '{"schema_version": 1}'.encode("utf-16")),
    ]


CASES: list[Case] = []

# --- simulate --------------------------------------------------------------------------------
SIM = ("simulate", "--requests", "20")
PIPELINE = "pipeline parallelism is not modelled"
CUSTOM_GPU = ("--peak-tflops", "1000", "--bandwidth-tbs", "3", "--memory-gb", "80")
CASES += _traffic_cases("simulate", SIM, _TRACE)
CASES += [
    _c("simulate", *SIM, "--budgets", "", says="--budgets"),
    _c("simulate", *SIM, "--budgets", ",", says="--budgets"),
    _c("simulate", *SIM, "--budgets", "0", says="--budgets"),
    _c("simulate", *SIM, "--budgets", "-512", says="--budgets"),
    _c("simulate", *SIM, "--budgets", "abc", says="--budgets"),
    _c("simulate", *SIM, "--budgets", "99999999999", says="--budgets"),
    _c("simulate", *SIM, "--budgets", "1.5", says="--budgets"),
    _c("simulate", *SIM, "--max-num-seqs", "0", says="--max-num-seqs"),
    _c("simulate", *SIM, "--max-num-seqs", "99999999999999999999", says="--max-num-seqs"),
    _c("simulate", *SIM, "--block-size", "0", says="--block-size"),
    _c("simulate", *SIM, "--block-size", "99999999999", says="--block-size"),
    _c("simulate", *SIM, "--gpu-memory-utilization", "0", says="--gpu-memory-utilization"),
    _c("simulate", *SIM, "--gpu-memory-utilization", "1.5", says="--gpu-memory-utilization"),
    _c("simulate", *SIM, "--gpu-memory-utilization", "nan", says="--gpu-memory-utilization"),
    _c("simulate", *SIM, "--long-prefill-token-threshold", "-1", says="--long-prefill"),
    _c("simulate", *SIM, "--warmup", "-1", says="--warmup"),
    _c("simulate", *SIM, "--warmup", "99999999999999", says="--warmup"),
    _c("simulate", *SIM, "--slo-tbt", "50", "--goodput", says="50ms"),
    _c("simulate", *SIM, "--slo-tbt", "nan", says="--slo-tbt"),
    _c("simulate", *SIM, "--slo-ttft", "1e400s", says="--slo-ttft"),
    _c("simulate", *SIM, "--slo-ttft", "0s", says="--slo-ttft"),
    _c("simulate", *SIM, "--gpu", "banana", says="--gpu"),
    _c("simulate", *SIM, "--model", "banana", says="--model"),
    _c(
        "simulate",
        *SIM,
        "--peak-tflops",
        "0",
        "--bandwidth-tbs",
        "1",
        "--memory-gb",
        "80",
        says="--peak-tflops",
    ),
    _c(
        "simulate",
        *SIM,
        "--peak-tflops",
        "1000",
        "--bandwidth-tbs",
        "inf",
        "--memory-gb",
        "80",
        says="--bandwidth-tbs",
    ),
    _c(
        "simulate",
        *SIM,
        "--peak-tflops",
        "nan",
        "--bandwidth-tbs",
        "3",
        "--memory-gb",
        "80",
        says="--peak-tflops",
    ),
    _c(
        "simulate",
        *SIM,
        "--peak-tflops",
        "1000",
        "--bandwidth-tbs",
        "3",
        "--memory-gb",
        "-80",
        says="--memory-gb",
    ),
    _c("simulate", *SIM, "--tensor-parallel", "0", says="--tensor-parallel"),
    _c("simulate", *SIM, "--tensor-parallel", "3", says="divisible by tensor parallel size (3)"),
    _c("simulate", *SIM, "-o", "{d}/" + "a" * 300 + "/x", says="File name too long"),
    _c("simulate", *SIM, "--tensor-parallel", "99999999999", says="--tensor-parallel"),
    _c("simulate", *SIM, "--compute-efficiency", "0", says="--compute-efficiency"),
    _c("simulate", *SIM, "--compute-efficiency", "1.5", says="--compute-efficiency"),
    _c("simulate", *SIM, "--bandwidth-efficiency", "nan", says="--bandwidth-efficiency"),
    _c("simulate", *SIM, "--overhead-ms", "-1", says="--overhead-ms"),
    _c("simulate", *SIM, "--overhead-ms", "inf", says="--overhead-ms"),
    _c("simulate", *SIM, "--mode", "banana", says="--mode"),
    _c("simulate", *SIM, "--dtype", "banana", says="--dtype"),
    _c("simulate", *SIM, "--requests", "99999999999999", says="--requests"),
    _c("simulate", *SIM, "-o", "{d}/file", files=(("file", b"mine\n"),), says="file"),
    _c(
        "simulate",
        *SIM,
        "-o",
        "{d}/mine",
        files=(("mine/results.json", b'{"mine": 1}\n'),),
        says="mine",
    ),
    _c("simulate", *SIM, "-o", "/proc/budgettune-x/out", expect=USER, says="/proc"),
]
CASES += _json_source_cases("simulate", (*SIM, "--profile"))
CASES += _json_source_cases("simulate", (*SIM, "--model"))
CASES += [
    _c("simulate", *SIM, "--profile", "{results}", needs=frozenset({"results"}), says="profile"),
    _c("simulate", *SIM, "--model", "{d}", says="config.json"),
]

# --- roofline --------------------------------------------------------------------------------
CASES += [
    _c("roofline", "roofline", "--prompt", "99999999999999999999", says="--prompt"),
    _c("roofline", "roofline", "--prompt", "0", says="--prompt"),
    _c("roofline", "roofline", "--prompt", "-5", says="--prompt"),
    _c("roofline", "roofline", "--prompt", "4096", "--chunk-sizes", "0", says="--chunk-sizes"),
    _c("roofline", "roofline", "--prompt", "4096", "--chunk-sizes", "", says="--chunk-sizes"),
    _c("roofline", "roofline", "--prompt", "4096", "--chunk-sizes", "abc", says="--chunk-sizes"),
    _c("roofline", "roofline", "--prompt", "1000000", "--chunk-sizes", "1", says="--chunk-sizes"),
    _c(
        "roofline",
        "roofline",
        "--prompt",
        "4096",
        "--chunk-sizes",
        "99999999999999999999",
        says="--chunk-sizes",
    ),
    _c("roofline", "roofline", "--prefill", "abc", says="--prefill"),
    _c("roofline", "roofline", "--prefill", "0", says="--prefill"),
    _c("roofline", "roofline", "--prefill", "-5", says="--prefill"),
    _c("roofline", "roofline", "--prefill", "10@-1", says="--prefill"),
    _c("roofline", "roofline", "--prefill", "10@abc", says="--prefill"),
    _c("roofline", "roofline", "--prefill", "99999999999999999999", says="--prefill"),
    _c("roofline", "roofline", "--decodes", "-1", says="--decodes"),
    _c("roofline", "roofline", "--decodes", "99999999999999999999", says="--decodes"),
    _c("roofline", "roofline", "--decodes", "4", "--context", "-1", says="--context"),
    _c(
        "roofline",
        "roofline",
        "--decodes",
        "4",
        "--context",
        "99999999999999999999",
        says="--context",
    ),
    _c(
        "roofline",
        "roofline",
        "--peak-tflops",
        "1000",
        "--bandwidth-tbs",
        "inf",
        "--memory-gb",
        "80",
        says="--bandwidth-tbs",
    ),
    _c("roofline", "roofline", "--bandwidth-tbs", "3", says="custom GPU"),
    # a custom GPU's figures too small to mean anything (1e-300 GB was taken, unused)
    *(
        _c("roofline", "roofline", *CUSTOM_GPU, flag, "1e-300", says=f"{flag}: must be at least")
        for flag in ("--peak-tflops", "--bandwidth-tbs", "--memory-gb")
    ),
    _c(
        "roofline",
        "roofline",
        "--peak-tflops",
        "nan",
        "--bandwidth-tbs",
        "3",
        "--memory-gb",
        "80",
        says="--peak-tflops",
    ),
    _c(
        "roofline",
        "roofline",
        "--peak-tflops",
        "1e308",
        "--bandwidth-tbs",
        "1e-308",
        "--memory-gb",
        "80",
        says="--",
    ),
    _c("roofline", "roofline", "--overhead-ms", "nan", says="--overhead-ms"),
    _c("roofline", "roofline", "--compute-efficiency", "-0.5", says="--compute-efficiency"),
    _c("roofline", "roofline", "--tensor-parallel", "0", says="--tensor-parallel"),
    _c("roofline", "roofline", "--tensor-parallel", "3", says="divisible by tensor parallel size"),
    # no command takes a pipeline-parallel size: the line says why, not only "no such option"
    _c("roofline", "roofline", "--pipeline-parallel-size", "2", says=PIPELINE),
    _c("simulate", *SIM, "--pp-size", "2", says=PIPELINE),
    _c("roofline", "roofline", "--gpu", "", says="--gpu"),
    _c("roofline", "roofline", "--model", "", says="--model"),
]
CASES += _json_source_cases("roofline", ("roofline", "--model"))
