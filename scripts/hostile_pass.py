#!/usr/bin/env python3
"""The hostile pass: every bad input of ``tests/hostile/hostile_cases.py`` and every fault of
``tests/hostile/hostile_faults.py``, run against the installed ``budgettune`` command in a
subprocess with a time limit and a memory cap, each outcome classified and counted.

    PYTHONPATH=. nice -n 19 .venv/bin/python scripts/hostile_pass.py [--only sweep] [--jobs 2]

Outcomes of an input: clean (exit 2 for a user's mistake, 1 for the environment, with a short
error that says what the case expects), traceback, hang (over ``--timeout``), memory (over
``--rss-mib``), accepted (exit 0 or 3: nothing refused), wrong-code, wordy, wrong-words.
A fault passes when it ends as it should and loses no point.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "hostile"))

from hostile_cases import Case  # noqa: E402
from hostile_setup import Fixtures, Verdict, judge, make_fixtures, prepare  # noqa: E402
from hostile_table import CASES  # noqa: E402

SERVING = "serving on"  # serve's line once it listens: a case that gets there was accepted


def budgettune_command() -> list[str]:
    found = Path(sys.executable).with_name("budgettune")
    return [str(found)] if found.exists() else [shutil.which("budgettune") or "budgettune"]


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_capped(
    argv: list[str],
    *,
    cwd: Path,
    stdin: bytes | None,
    timeout_s: float,
    rss_cap: int,
    env: dict[str, str] | None = None,
) -> tuple[int | None, str, bool, bool, int, float]:
    """Run ``argv``; returns (exit code or None, output, hung, over memory, peak RSS, wall s).
    The process runs in its own session so that a kill takes what it started too."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            argv, cwd=cwd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
        )  # fmt: skip
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        hung = over = False
        peak = 0
        while proc.poll() is None:
            peak = max(peak, rss_bytes(proc.pid))
            if peak > rss_cap:
                over = True
            elif time.monotonic() - started > timeout_s:
                hung = True
            if hung or over:
                os.killpg(proc.pid, 9)
                proc.wait()
                break
            time.sleep(0.05)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)  # anything it left behind
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    code = None if hung or over else proc.returncode
    return code, text, hung, over, peak, time.monotonic() - started


def run_case(
    case: Case, root: Path, index: int, fixtures: Fixtures, args: argparse.Namespace
) -> tuple[Case, Verdict, int, float]:
    folder = root / f"case-{index:03d}"
    argv, writers = prepare(case, folder, fixtures)
    timeout = args.serve_timeout if case.command == "serve" else args.timeout
    code, output, hung, over, peak, wall = run_capped(
        [*budgettune_command(), *argv], cwd=folder, stdin=case.stdin, timeout_s=timeout,
        rss_cap=args.rss_mib << 20,
    )  # fmt: skip
    for writer in writers:
        writer.join(timeout=1)
    if hung and SERVING in output:
        verdict = Verdict("accepted", "it served")
    else:
        verdict = judge(case, code, output, hung=hung, over_memory=over)
    shutil.rmtree(folder, ignore_errors=True)
    return case, verdict, peak, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="commands to run (comma-separated), default all")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--serve-timeout", type=float, default=15.0)
    parser.add_argument("--rss-mib", type=int, default=1024)
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--no-inputs", action="store_true")
    parser.add_argument("--json", type=Path, help="write every outcome here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hostile-"))

    def budgettune(argv: list[str]) -> None:
        done = subprocess.run([*budgettune_command(), *argv], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"fixture failed: {argv}: {done.stderr[-2000:]}")

    records: list[dict[str, object]] = []
    counts: Counter[str] = Counter()
    if not args.no_inputs:
        fixtures = make_fixtures(root / "fixtures", budgettune)
        only = set(args.only.split(",")) if args.only else None
        cases = [case for case in CASES if only is None or case.command in only]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [
                pool.submit(run_case, case, root, index, fixtures, args)
                for index, case in enumerate(cases)
            ]
            for future in futures:
                case, verdict, peak, wall = future.result()
                counts[(verdict.outcome, case.expect)] += 1  # type: ignore[index]
                records.append(
                    {
                        "case": case.id,
                        "expect": case.expect,
                        "outcome": verdict.outcome,
                        "detail": verdict.detail,
                        "peak_rss_mib": round(peak / 2**20),
                        "wall_s": round(wall, 2),
                    }
                )
                if not verdict.clean:
                    print(f"{verdict.outcome:12s} {case.id}  [{verdict.detail}]", flush=True)
        clean2 = counts[("clean", 2)]
        clean1 = counts[("clean", 1)]
        by_outcome: Counter[str] = Counter()
        for (outcome, _), n in counts.items():  # type: ignore[misc]
            by_outcome[outcome] += n
        peak_mib = max((int(r["peak_rss_mib"]) for r in records), default=0)  # type: ignore[call-overload]
        print(
            f"\ninputs tried {len(cases)}: clean exit 2 {clean2}, clean exit 1 {clean1}, "
            f"tracebacks {by_outcome['traceback']}, hangs {by_outcome['hang']}, "
            f"over memory {by_outcome['memory']}, silently accepted {by_outcome['accepted']}, "
            f"wrong exit code {by_outcome['wrong-code']}, wordy {by_outcome['wordy']}, "
            f"wrong words {by_outcome['wrong-words']}; peak RSS {peak_mib} MiB; "
            f"{time.monotonic() - started:.0f} s"
        )
    if not args.no_faults:
        from hostile_faults import FAULTS
        from hostile_http import http_server

        FAULTS.append(http_server)

        lost = 0
        failed = 0
        for fault in FAULTS:
            outcome = fault(root / "faults", budgettune_command())
            lost += outcome.points_lost
            failed += not outcome.ok
            records.append(
                {
                    "fault": outcome.name,
                    "ok": outcome.ok,
                    "detail": outcome.detail,
                    "points_lost": outcome.points_lost,
                }
            )
            print(
                f"fault {'ok  ' if outcome.ok else 'FAIL'} {outcome.name}: {outcome.detail}",
                flush=True,
            )
        print(f"\nfaults tried {len(FAULTS)}: failed {failed}, points lost {lost}")
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
