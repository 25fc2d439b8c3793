"""What the real engines (vLLM, SGLang) share on top of :mod:`budgettune.engines.process`: the
installed version read before launch, pass-through checks, an early and named failure for flags
the engine does not know, and the wait until the previous server's processes and GPU memory are
gone before the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from budgettune.core.errors import EngineError, UserError
from budgettune.engines.base import (
    CommandEngine,
    EngineHandle,
    LaunchSpec,
    ProgressCallback,
)
from budgettune.engines.process import group_members, kill_group_now, launch_process

VERSION_PROBE_TIMEOUT_S = 60.0
GROUP_GONE_TIMEOUT_S = 30.0
GPU_RELEASE_TIMEOUT_S = 120.0
GPU_POLL_S = 0.5
# Memory the driver may keep after a server exits, or that another tenant's small process uses.
GPU_SLACK_MIB = 512

# Reads a distribution's version without importing the package (importing vLLM takes ~5 s).
_VERSION_SNIPPET = """
import importlib.metadata as md, importlib.util, sys
module, names = sys.argv[1], sys.argv[2:]
for name in names:
    try:
        print(name, md.version(name))
        sys.exit(0)
    except md.PackageNotFoundError:
        pass
print("-", "unknown" if importlib.util.find_spec(module) else "missing")
"""
_UNRECOGNIZED = re.compile(r"error: unrecognized arguments: (.+)$", re.MULTILINE)
_INVALID_CHOICE = re.compile(r"error: argument (\S+?)(?:/\S+)?: (.+)$", re.MULTILINE)
# trtllm-serve parses with click: "Error: No such option: --x" (and "(Possible options: ...)"),
# "Error: Invalid value for '--x': ...".
_CLICK_UNKNOWN = re.compile(r"Error: No such option: (\S+)", re.MULTILINE)
_CLICK_INVALID = re.compile(r"Error: Invalid value for '([^']+)': (.+)$", re.MULTILINE)

# Process groups of servers this process launched and has not yet seen gone.
_live_groups: set[int] = set()


@dataclass(slots=True, frozen=True)
class InstalledVersion:
    """The engine's distribution and version as read from the interpreter that will run it."""

    distribution: str
    version: str


def engine_log_path(run_dir: Path, spec: LaunchSpec) -> Path:
    """``run_dir/engine-<budget>.log``: the budget, 'none' without chunking, or 'default'."""
    if not spec.chunked_prefill:
        label = "none"
    elif spec.budget_tokens is None:
        label = "default"
    else:
        label = str(spec.budget_tokens)
    return run_dir / f"engine-{label}.log"


# vLLM and SGLang read a YAML file of flags with --config, trtllm-serve one of LLM-API
# arguments; any could set a managed flag.
CONFIG_FLAG = "--config"


# Pipeline parallelism, as each engine spells it (vLLM: --pipeline-parallel-size, -pp; SGLang:
# --pp-size and its alias --pipeline-parallel-size; trtllm-serve: --pp_size). It splits the
# layers into stages that hand activations on, so an iteration is no longer one pass over every
# layer: budgettune's step model, its candidates and its predictions time exactly that pass (on
# --tensor-parallel-size GPUs at most), and would be wrong for every budget.
PIPELINE_FLAGS = ("--pipeline-parallel-size", "-pp", "--pp-size")
PIPELINE_REFUSED = (
    "pipeline parallelism is not modelled: budgettune's step model times one pass over every "
    "layer, on at most --tensor-parallel-size GPUs; measure one pipeline stage (a size of 1) or "
    "split the model with --tensor-parallel-size"
)


def _pipeline_size(args: Sequence[str], index: int) -> str | None:
    """The value given to the pipeline flag at ``args[index]`` (``--flag=N`` or ``--flag N``)."""
    arg = args[index]
    if "=" in arg:
        return arg.split("=", 1)[1]
    return args[index + 1] if index + 1 < len(args) else None


def pipeline_flag(flag: str, *, abbreviations: bool) -> bool:
    """Whether the engine's parser reads ``flag`` as a pipeline-parallel size: one of
    PIPELINE_FLAGS, or (argparse) a long flag that only one of them starts with."""
    if flag in PIPELINE_FLAGS:
        return True
    if not abbreviations or not flag.startswith("--") or len(flag) < 4:
        return False
    return managed_target(flag, dict.fromkeys(PIPELINE_FLAGS, "")) is not None


def check_passthrough(
    args: Sequence[str], managed: Mapping[str, str], engine: str, *, abbreviations: bool = True
) -> None:
    """Refuse pass-through flags budgettune sets itself (it would measure the wrong config).

    ``managed`` maps an engine flag to the budgettune option that sets it. A flag is compared
    in the form the engine's parser resolves: ``--flag=value`` as ``--flag``, underscores as
    dashes (vLLM reads ``--max_num_batched_tokens`` as ``--max-num-batched-tokens``; SGLang
    would reject it anyway), and a unique prefix of a managed flag as that flag (both parse
    with argparse, which expands abbreviations: ``--chunked-prefill`` is
    ``--chunked-prefill-size``). ``abbreviations`` False: the engine's parser expands none
    (click, trtllm-serve's), so a prefix is a flag of its own. ``--config`` is refused for
    every engine, and so is a pipeline-parallel size other than 1 (PIPELINE_REFUSED). Raises
    UserError (field engine_arg) naming the flag, in one line.
    """
    for index, arg in enumerate(args):
        flag = passthrough_flag(arg)
        if flag is None:
            continue
        spelled = arg.split("=", 1)[0]
        if pipeline_flag(flag, abbreviations=abbreviations):
            if _pipeline_size(args, index) != "1":
                raise UserError(f"{spelled} is refused for {engine}: {PIPELINE_REFUSED}",
                                field="engine_arg")  # fmt: skip
            continue
        if flag == CONFIG_FLAG:
            raise UserError(
                f"{spelled} is refused for {engine}: a config file can set flags budgettune "
                "manages; pass its other settings as engine args",
                field="engine_arg",
            )
        target = managed_target(flag, managed) if abbreviations else flag
        if target is None or target not in managed:
            continue
        same = "" if target == spelled else f" (= {target})"
        raise UserError(
            f"{spelled}{same} is set by budgettune for {engine} ({managed[target]}); remove it",
            field="engine_arg",
        )


def passthrough_flag(arg: str) -> str | None:
    """The flag ``arg`` names as the engine's parser sees it (``--a_b=1`` -> ``--a-b``; the
    part before a ``.`` of vLLM's ``--json-arg.key``), or None when ``arg`` is a value."""
    if len(arg) < 2 or not arg.startswith("-") or arg[1].isdigit() or arg[1] == ".":
        return None
    name = arg.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
    return None if name in ("-", "--") else name


def managed_target(flag: str, managed: Mapping[str, str]) -> str | None:
    """The managed flag ``flag`` sets: itself, or the one managed flag it abbreviates. (No flag
    vLLM 0.32 or SGLang 0.5 knows under its own name is a prefix of a managed flag, so a prefix
    is an abbreviation; one of several managed flags is ambiguous and the engine refuses it.)"""
    if flag in managed:
        return flag
    expanded = [name for name in managed if name.startswith(flag)]
    return expanded[0] if len(expanded) == 1 else None


def resolve_executable(name: str) -> str | None:
    """The path of ``name`` (an absolute/relative path or a command on PATH), or None."""
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name)


def interpreter_of(command: Sequence[str]) -> list[str] | None:
    """The Python interpreter (as an argument list) that ``command`` runs under, if we can tell.

    ``python -m pkg ...``: that python, also behind a wrapper such as ``chrt --idle 0`` or
    ``numactl -N 0`` (the first ``*python* -m``). A console script: the interpreter of its
    shebang, including pip's ``#!/bin/sh`` + ``'''exec' "/long/path/python"`` form for long paths.
    """
    exe = resolve_executable(command[0])
    if exe is None:
        return None
    if len(command) >= 3 and command[1] == "-m":
        return [exe]
    for index in range(1, len(command) - 2):
        if "python" in Path(command[index]).name and command[index + 1] == "-m":
            found = resolve_executable(command[index])
            return None if found is None else [found]
    try:
        with open(exe, "rb") as handle:
            head = handle.read(1024).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return None
    if not head or not head[0].startswith("#!"):
        return None
    shebang = shlex.split(head[0][2:].strip())
    if any("python" in Path(part).name for part in shebang):
        return shebang
    if len(head) > 1 and head[1].startswith("'''exec'"):
        parts = shlex.split(head[1][len("'''exec'") :].split(' "$0"')[0])
        if parts and "python" in Path(parts[0]).name:
            return parts[:1]
    return None


def run_in_interpreter(
    command: Sequence[str],
    snippet: str,
    args: Sequence[str],
    env: Mapping[str, str] | None,
    timeout_s: float,
) -> subprocess.CompletedProcess[str] | None:
    """Run ``python -c snippet args`` in the interpreter ``command`` runs under, with ``env``
    added as the engine will run; None when that interpreter is unknown, cannot start, or the
    snippet outlives ``timeout_s``."""
    interpreter = interpreter_of(command)
    if interpreter is None:
        return None
    try:
        return subprocess.run(
            [*interpreter, "-c", snippet, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env={**os.environ, **(env or {})},
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def installed_version(
    command: Sequence[str],
    distributions: Sequence[str],
    module: str,
    env: Mapping[str, str] | None = None,
) -> InstalledVersion:
    """Read the engine's version from the interpreter ``command`` runs under (with ``env``
    added, as the engine will run), without importing the engine (about 0.1 s).

    Raises EngineError when the executable does not exist, or when its interpreter has neither
    one of ``distributions`` nor the top-level ``module``. Returns version 'unknown' when it
    cannot tell (not a Python program, or a source checkout without metadata).
    """
    if resolve_executable(command[0]) is None:
        raise EngineError(
            f"engine command not found: {command[0]!r}",
            field="engine_cmd",
            hint="install the engine, or give the engine command where it is installed, e.g. "
            "'/path/to/venv/bin/python -m vllm.entrypoints.openai.api_server'",
        )
    unknown = InstalledVersion(distributions[0], "unknown")
    done = run_in_interpreter(
        command, _VERSION_SNIPPET, [module, *distributions], env, VERSION_PROBE_TIMEOUT_S
    )
    if done is None:
        return unknown
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2:
        return unknown
    if words == ["-", "missing"]:
        raise EngineError(
            f"{' '.join(done.args[: done.args.index('-c')])} cannot import {module} "
            f"(none of {', '.join(distributions)} is installed there)",
            field="engine_cmd",
            hint="give the engine command of the environment the engine is installed in",
        )
    if words[0] == "-":
        return unknown
    return InstalledVersion(words[0], words[1])


def flag_error(error: EngineError, engine: str, version: str) -> EngineError:
    """Rename a start failure caused by a flag the engine does not know; else return it as is."""
    tail = error.log_tail
    unknown = _UNRECOGNIZED.findall(tail) or _CLICK_UNKNOWN.findall(tail)
    if unknown:
        flags = unknown[-1].strip()
        return EngineError(
            f"{engine} {version} does not accept {flags}",
            log_tail=tail,
            hint="upgrade the engine, or drop that flag (from the pass-through engine arguments "
            "or the option that sets it)",
        )
    invalid = _INVALID_CHOICE.findall(tail) or _CLICK_INVALID.findall(tail)
    if invalid:
        flag, why = invalid[-1]
        return EngineError(f"{engine} {version} rejected {flag}: {why.strip()}", log_tail=tail)
    return error


def nvidia_smi() -> str | None:
    """The nvidia-smi executable, or None on machines without NVIDIA GPUs."""
    return shutil.which("nvidia-smi")


def _query(exe: str, *args: str) -> list[list[str]]:
    try:
        done = subprocess.run(
            [exe, *args, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if done.returncode != 0:
        return []
    return [[cell.strip() for cell in line.split(",")] for line in done.stdout.splitlines() if line]


def gpu_memory_used_mib() -> list[int] | None:
    """Memory in use on each GPU (MiB), or None without nvidia-smi."""
    exe = nvidia_smi()
    if exe is None:
        return None
    rows = _query(exe, "--query-gpu=memory.used")
    return [int(float(row[0])) for row in rows if row and row[0].replace(".", "").isdigit()]


def gpu_compute_pids() -> set[int]:
    """PIDs nvidia-smi lists as holding GPU memory (empty without nvidia-smi)."""
    exe = nvidia_smi()
    if exe is None:
        return set()
    rows = _query(exe, "--query-compute-apps=pid")
    return {int(row[0]) for row in rows if row and row[0].isdigit()}


async def wait_group_gone(pgid: int, timeout_s: float = GROUP_GONE_TIMEOUT_S) -> None:
    """Wait until no live process of group ``pgid`` remains; SIGKILL it at the timeout.

    Raises EngineError when members survive even that.
    """
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            kill_group_now(pgid)
            await asyncio.sleep(1.0)
            left = group_members(pgid)
            if left:
                raise EngineError(f"previous engine process group {pgid} survives: pids {left}")
            break
        await asyncio.sleep(0.1)
    _live_groups.discard(pgid)


async def wait_gpu_released(
    pids: set[int], baseline_mib: list[int] | None, timeout_s: float = GPU_RELEASE_TIMEOUT_S
) -> None:
    """After a server stopped: wait until nvidia-smi no longer lists its ``pids`` and each GPU
    uses at most what it used before the start (``baseline_mib``) plus a small slack.

    Returns at once without nvidia-smi. Raises EngineError naming the figures at the timeout.
    """
    if baseline_mib is None or nvidia_smi() is None:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        holders = gpu_compute_pids() & pids
        used = gpu_memory_used_mib() or []
        over = [
            (gpu, now, before)
            for gpu, (now, before) in enumerate(zip(used, baseline_mib, strict=False))
            if now > before + GPU_SLACK_MIB
        ]
        if not holders and not over:
            return
        if time.monotonic() > deadline:
            detail = "; ".join(f"GPU {g} uses {n} MiB (was {b} MiB)" for g, n, b in over)
            raise EngineError(
                f"GPU memory not released {timeout_s:.0f} s after the engine stopped"
                + (f": pids {sorted(holders)} still listed" if holders else "")
                + (f"; {detail}" if detail else ""),
                hint="another process may be using the GPU; check nvidia-smi",
            )
        await asyncio.sleep(GPU_POLL_S)


@contextlib.asynccontextmanager
async def launch_served(
    engine: CommandEngine,
    spec: LaunchSpec,
    on_progress: ProgressCallback | None,
    *,
    version: InstalledVersion,
    after_ready: Callable[[EngineHandle], None] | None = None,
) -> AsyncIterator[EngineHandle]:
    """:func:`process.launch_process` for a real engine: first wait for earlier servers' groups
    to be gone, name an unknown flag when the start fails, fill in the version, and after the
    stop wait for the GPU memory to be released (not after Ctrl-C: leave at once then).
    """
    for pgid in list(_live_groups):
        await wait_group_gone(pgid)
    baseline = gpu_memory_used_mib()
    pids: set[int] = set()
    ready = False
    interrupted = False
    try:
        async with launch_process(engine, spec, on_progress) as handle:
            ready = True
            assert handle.pgid is not None  # a launched engine always has its own group
            _live_groups.add(handle.pgid)
            if handle.version in ("", "unknown"):
                handle.version = version.version
            if after_ready is not None:
                after_ready(handle)
            try:
                yield handle
            finally:
                pids = {handle.pgid, *group_members(handle.pgid)}
    except (asyncio.CancelledError, KeyboardInterrupt):
        interrupted = True
        raise
    except EngineError as error:
        if ready:
            raise
        raise flag_error(error, engine.name, version.version) from None
    finally:
        # launch_process has stopped the group (or raised because it could not).
        for pgid in [p for p in _live_groups if p in pids and not group_members(p)]:
            _live_groups.discard(pgid)
        if ready and not interrupted:
            await wait_gpu_released(pids, baseline)
