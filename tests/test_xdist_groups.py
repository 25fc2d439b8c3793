"""scripts/test-fast.sh runs its workers with --dist loadgroup so that tests sharing an expensive
fixture (an embedded-engine sweep, the hostile fixtures) run on one worker and make it once. On
some pytest/pytest-xdist pairs the xdist_group mark is silently ignored: this runs a pytest with
two workers on a module of grouped tests and checks that one worker ran them all."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

GROUPED = """
import pytest

pytestmark = pytest.mark.xdist_group("together")

@pytest.mark.parametrize("i", range(6))
def test_member(i):
    pass
"""


def test_a_group_runs_on_one_worker(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
         "-p", "no:cacheprovider", "-o", "addopts=", "test_grouped.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    workers = re.findall(r"\[(gw\d+)\].*PASSED", done.stdout)
    assert len(workers) == 6, done.stdout[-2000:]
    assert len(set(workers)) == 1, f"xdist_group spread over workers {sorted(set(workers))}"
