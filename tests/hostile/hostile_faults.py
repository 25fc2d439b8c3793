"""The faults of the hostile pass: a full disk at any moment of a sweep, a kill -9 of the engine
or of budgettune, a second sweep in a folder being swept, a server that accepts and never
answers, a port another server holds, engines that never start. Each runs the installed command
in subprocesses and returns a :class:`FaultOutcome`: whether it ended as it should, and how many
finished points a ``--resume`` did not find.

A full disk is a small tmpfs (root only); where none can be mounted the disk faults say so and
count as not run."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SWEEP = (
    "sweep", "--engine", "sim", "--requests", "12", "--rate", "4", "--slo-tbt", "50ms",
    "--baseline", "none",
)  # fmt: skip
POINT_LINE = re.compile(r"^\s+budget (\d+): ", re.MULTILINE)
RESUMED = re.compile(r"resuming .*: (\d+) budget\(s\) already measured")


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    name: str
    ok: bool
    detail: str
    points_lost: int = 0
    ran: bool = True


Fault = Callable[[Path, Sequence[str]], FaultOutcome]


def _run(
    cmd: Sequence[str], *argv: str, timeout: float = 180, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd)


def _start(cmd: Sequence[str], *argv: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([*cmd, *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=cwd)  # fmt: skip


def _finish(proc: subprocess.Popen[str], timeout: float = 180) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out += "\n[hostile pass: killed after the time limit]"
    return out


def _traceback(text: str) -> bool:
    return "Traceback (most recent call last)" in text


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _wait_for(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _lines(path: Path) -> int:
    try:
        return path.read_text().count("\n")
    except OSError:
        return 0


def _measured(run: Path, out: str) -> int:
    """Budgets a run finished: a point line it printed, or a complete budget-N/results.json
    (a replay that ran to its end, whatever was written after it)."""
    budgets = {int(found) for found in POINT_LINE.findall(out)}
    for results in run.glob("budget-*/results.json"):
        try:
            json.loads(results.read_bytes())
        except (OSError, ValueError):
            continue
        budgets.add(int(results.parent.name.split("-", 1)[1]))
    return len(budgets)


def _resume_count(cmd: Sequence[str], run: Path) -> tuple[int, subprocess.CompletedProcess[str]]:
    """How many points a --resume of ``run`` found (-1: it said nothing of them), and its run."""
    done = _run(cmd, "sweep", "--resume", str(run))
    found = RESUMED.search(" ".join((done.stderr + done.stdout).split()))  # lines wrap
    return (int(found.group(1)) if found else -1), done


def _broken_files(run: Path) -> list[str]:
    """Files a crash must never leave: a temporary file, or a JSON document cut short."""
    bad = []
    for path in run.rglob("*"):
        if path.name.endswith(".tmp") or ".tmp." in path.name:
            bad.append(f"{path.name} (temporary)")
        elif path.suffix == ".json" and path.is_file():
            try:
                json.loads(path.read_bytes())
            except ValueError:
                bad.append(f"{path.relative_to(run)} ({path.stat().st_size} bytes, not JSON)")
    return bad


# --- a full disk ------------------------------------------------------------------------------
@contextlib.contextmanager
def tmpfs(where: Path, size: str = "48m") -> Iterator[Path | None]:
    """A fresh tmpfs at ``where`` (None when this user cannot mount one)."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True).returncode == 0  # fmt: skip
    try:
        yield where if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system holding ``folder`` to the last byte; returns the filler."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as handle:
        block = b"\0" * (1 << 20)
        while block:
            try:
                handle.write(block)
            except OSError as error:
                if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                block = block[: len(block) // 2]
    return filler


def disk_full_at(delay_s: float, budgets: str = "256,512") -> Fault:
    """The disk fills ``delay_s`` after the first engine's log appears (during its start, its
    replay or the writes after it): budgettune must stop with exit 1, leave no temporary or
    half-written file, and a --resume (after space is freed) must find every point it
    reported finished."""

    def fault(root: Path, cmd: Sequence[str]) -> FaultOutcome:
        name = f"disk full {delay_s:g} s into a sweep ({budgets})"
        with tmpfs(root / f"tmpfs-{delay_s:g}") as disk:
            if disk is None:
                return FaultOutcome(name, False, "no tmpfs (needs root)", ran=False)
            run = disk / "run"
            proc = _start(cmd, *SWEEP, "--exhaustive", "--budgets", budgets, "-o", str(run))
            _wait_for(lambda: any(run.glob("engine-*.log")), 60)
            time.sleep(delay_s)
            filler = fill(disk)
            out = _finish(proc)
            reported = _measured(run, out)
            bad = _broken_files(run)
            filler.unlink()
            code = proc.returncode
            if code == 0:  # it all fit before the disk filled: still a fine run
                return FaultOutcome(name, not bad, f"finished before the disk filled; {bad}")
            found, resumed = _resume_count(cmd, run)
            lost = max(0, reported - max(found, 0))
            ok = (
                found >= 0
                and code == 1 and not _traceback(out) and not bad and lost == 0
                and resumed.returncode in (0, 3)
            )  # fmt: skip
            last = [line for line in out.splitlines() if "error" in line][-1:]
            detail = (f"exit {code} {last}; {reported} point(s) reported, resume found {found}, "
                      f"resume exit {resumed.returncode}; broken files {bad}")  # fmt: skip
            return FaultOutcome(name, ok, detail, lost)

    return fault


def disk_full_writes(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """`trace synth -o` and `report -o` onto a full disk: exit 1, nothing half-written."""
    name = "disk full: trace synth -o, report -o, simulate -o"
    with tmpfs(root / "tmpfs-writes", "4m") as disk:
        if disk is None:
            return FaultOutcome(name, False, "no tmpfs (needs root)", ran=False)
        fill(disk)
        runs = {
            "synth": _run(cmd, "trace", "synth", "--rate", "4", "--requests", "50000",
                          "-o", str(disk / "t.jsonl")),
            "simulate": _run(cmd, "simulate", "--requests", "20", "--budgets", "512",
                             "-o", str(disk / "sim")),
        }  # fmt: skip
        bad = [path.name for path in disk.rglob("*") if path.is_file() and path.name != "filler"]
        codes = {key: done.returncode for key, done in runs.items()}
        tracebacks = [key for key, done in runs.items() if _traceback(done.stderr)]
        ok = all(code == 1 for code in codes.values()) and not bad and not tracebacks
        return FaultOutcome(name, ok, f"exits {codes}; left {bad}; tracebacks {tracebacks}")


# --- kills ------------------------------------------------------------------------------------
def kill_engine(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """kill -9 of the engine during the first replay: the point is recorded as crashed, the
    sweep goes on, and a --resume finds every point."""
    name = "kill -9 of the engine mid-replay"
    run = root / "kill-engine"
    shutil.rmtree(run, ignore_errors=True)
    proc = _start(cmd, *SWEEP, "--exhaustive", "--budgets", "256,512", "-o", str(run))
    _wait_for(lambda: bool(_children(proc.pid)) and any(run.glob("engine-*.log")), 60)
    time.sleep(2.5)
    for child in _children(proc.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)
    out = _finish(proc)
    reported = _measured(run, out)
    found, resumed = _resume_count(cmd, run)
    lost = max(0, reported - found)
    ok = proc.returncode in (0, 3) and not _traceback(out) and lost == 0 and "crash" in out
    return FaultOutcome(name, ok, f"exit {proc.returncode}; {reported} reported, resume found "
                        f"{found} (exit {resumed.returncode})", lost)  # fmt: skip


def kill_budgettune(sig: int) -> Fault:
    def fault(root: Path, cmd: Sequence[str]) -> FaultOutcome:
        name = f"{signal.Signals(sig).name} of budgettune after its first point"
        run = root / f"kill-bt-{sig}"
        shutil.rmtree(run, ignore_errors=True)
        proc = _start(cmd, *SWEEP, "--exhaustive", "--budgets", "256,512", "-o", str(run))
        _wait_for(lambda: _lines(run / "points.jsonl") >= 1, 90)
        engines = _children(proc.pid)
        if sig == signal.SIGKILL:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        out = _finish(proc)
        left = _wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in engines), 10)
        written = max(_lines(run / "points.jsonl"), _measured(run, out))
        found, resumed = _resume_count(cmd, run)
        lost = max(0, written - found)
        expected = -9 if sig == signal.SIGKILL else 130
        ok = (proc.returncode == expected and lost == 0 and left and not _traceback(out)
              and resumed.returncode in (0, 3))  # fmt: skip
        detail = (f"exit {proc.returncode}; {written} point(s) on disk, resume found {found} "
                  f"(exit {resumed.returncode}); engines gone: {left}")  # fmt: skip
        return FaultOutcome(name, ok, detail, lost)

    return fault


def second_sweep_in_the_folder(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """A `--resume` of a run folder while its sweep is still running: refused at once with the
    running one's pid (both measured every budget, into one points.jsonl), and the first sweep
    ends as if alone, each budget saved once."""
    name = "second sweep (--resume) in a folder being swept"
    run = root / "second-sweep"
    shutil.rmtree(run, ignore_errors=True)
    proc = _start(cmd, *SWEEP, "--exhaustive", "--budgets", "256,512", "-o", str(run))
    _wait_for(lambda: (run / "sweep.json").is_file(), 60)
    second = _run(cmd, "sweep", "--resume", str(run))
    out = _finish(proc)
    said = " ".join(second.stderr.split())
    budgets = [json.loads(line)["budget"] for line in _text_lines(run / "points.jsonl")]
    refused = second.returncode == 2 and said.startswith(
        f"error: --resume: another budgettune (pid {proc.pid}) is running a sweep in"
    )
    ok = (refused and proc.returncode in (0, 3) and sorted(budgets) == [256, 512]
          and not _traceback(out + second.stderr))  # fmt: skip
    detail = (f"second exit {second.returncode} ({said[:120]}); first exit {proc.returncode}, "
              f"points {budgets}")  # fmt: skip
    return FaultOutcome(name, ok, detail)


def _text_lines(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


# --- servers that misbehave -------------------------------------------------------------------
@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A TCP server that accepts every connection and never answers; yields its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()


def never_answers(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """sweep and replay against a server that accepts and never answers: exit 1, bounded."""
    name = "a server that accepts and never answers (--url)"
    with silent_server() as port:
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        sweep = _run(cmd, "sweep", "--url", url, "--slo-tbt", "50ms", "--requests", "12",
                     "--rate", "4", "-o", str(root / "silent-run"), timeout=300)  # fmt: skip
        sweep_s = time.monotonic() - started
        started = time.monotonic()
        replay = _run(cmd, "replay", "--url", url, "--requests", "5", "--rate", "5", "-o",
                      str(root / "silent-replay"), timeout=300)  # fmt: skip
        replay_s = time.monotonic() - started
    text = sweep.stderr + replay.stderr
    ok = (sweep.returncode == 1 and replay.returncode == 1 and sweep_s < 45 and replay_s < 45
          and not _traceback(text) and "ReadTimeout:\n" not in text + "\n"
          and "ReadTimeout: \n" not in text + "\n")  # fmt: skip
    last = [line for line in text.splitlines() if "error" in line][:2]
    return FaultOutcome(name, ok, f"sweep exit {sweep.returncode} in {sweep_s:.0f} s, replay "
                        f"exit {replay.returncode} in {replay_s:.0f} s; {last}")  # fmt: skip


def port_taken(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """replay --port P while another server answers on P (a running `budgettune serve`, and a
    dual-stack HTTP server on ``::``, which leaves 127.0.0.1:P bindable yet answers there) and
    while a plain socket holds P: refused before anything is measured (exit 1 or 2, naming
    --port)."""
    name = "--port held by another server (budgettune serve, a dual-stack server, a socket)"
    results = []
    up = True
    others = {
        "serve": [*cmd, "serve", "--port", "{port}", "--budget", "512"],
        "dual-stack": [sys.executable, "-m", "http.server", "--bind", "::", "{port}"],
    }
    for label, argv in others.items():
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        other = subprocess.Popen([arg.replace("{port}", str(port)) for arg in argv],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)  # fmt: skip
        try:
            up = up and _wait_for(lambda port=port: _connects(port), 30)
            results.append(_run(cmd, "replay", "--engine", "sim", "--port", str(port),
                                "--requests", "5", "--rate", "5", "-o",
                                str(root / f"taken-{label}")))  # fmt: skip
        finally:
            os.killpg(other.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                other.wait(20)
    with silent_server() as silent:
        results.append(
            _run(
                cmd,
                "replay",
                "--engine",
                "sim",
                "--port",
                str(silent),
                "--requests",
                "5",
                "--rate",
                "5",
                "-o",
                str(root / "taken-raw"),
            )
        )
    ok = up and all(done.returncode in (1, 2) and "--port" in done.stderr and not _traceback(
        done.stderr) and "results:" not in done.stdout for done in results)  # fmt: skip
    lines = [[line for line in d.stderr.splitlines() if "error" in line][:1] for d in results]
    return FaultOutcome(name, ok, f"exits {[d.returncode for d in results]}: {lines}")


def _connects(port: int) -> bool:
    with socket.socket() as conn:
        conn.settimeout(0.5)
        return conn.connect_ex(("127.0.0.1", port)) == 0


def engines_fail(root: Path, cmd: Sequence[str]) -> FaultOutcome:
    """Every engine failing to start (a command that exits at once; one that never gets
    healthy): exit 1 with the reason, not 3."""
    name = "every engine fails to start"
    dead = _run(cmd, *SWEEP, "--budgets", "256,512", "--engine-cmd", "false", "-o",
                str(root / "fail-run"))  # fmt: skip
    stuck = _run(cmd, *SWEEP, "--budgets", "256", "--engine-cmd", "sleep 600",
                 "--health-timeout", "2s", "-o", str(root / "stuck-run"))  # fmt: skip
    replay = _run(cmd, "replay", "--engine", "sim", "--engine-cmd", "false", "--requests", "5",
                  "--rate", "5", "-o", str(root / "fail-replay"))  # fmt: skip
    results = {"dead sweep": dead, "stuck sweep": stuck, "dead replay": replay}
    ok = all(d.returncode == 1 and not _traceback(d.stderr) for d in results.values())
    return FaultOutcome(name, ok, ", ".join(f"{k} exit {d.returncode}" for k, d in
                                            results.items()))  # fmt: skip


FAULTS: list[Fault] = [
    disk_full_at(0.5),
    disk_full_at(2.5),
    disk_full_at(4.0),
    disk_full_at(6.0, budgets="256"),
    disk_full_writes,
    kill_engine,
    kill_budgettune(signal.SIGKILL),
    kill_budgettune(signal.SIGTERM),
    second_sweep_in_the_folder,
    never_answers,
    port_taken,
    engines_fail,
]
