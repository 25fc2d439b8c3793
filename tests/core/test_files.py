"""core/files: a write that fails (a full disk, simulated at the os.write the file goes through)
leaves the old file or none, never part of one and never a temporary file; an append that fails
is cut back off, and the reserve lets one line in on a full disk."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from budgettune.core import files
from budgettune.core.errors import StorageError, UserError


class _Disk:
    """os.write that takes ``room`` bytes in all, then fails as a full disk does (a short
    write first, then ENOSPC), for the files under ``folder`` only."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path, room: int) -> None:
        self.room = room
        real = os.write

        def write(fd: int, data: bytes | memoryview) -> int:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
                return real(fd, data)
            if self.room <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            taken = min(len(data), self.room)
            self.room -= taken
            return real(fd, bytes(data[:taken]))

        monkeypatch.setattr(os, "write", write)


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "recommendation.json"
    target.write_text('{"old": true}\n')
    monkeypatch.setattr(os, "fsync", _full_disk)  # where a full disk shows at the latest
    with pytest.raises(StorageError, match="No space left on device") as caught:
        files.write_atomic(target, '{"new": true}\n' * 1000)
    assert caught.value.exit_code == 1
    assert target.read_text() == '{"old": true}\n'
    assert [path.name for path in tmp_path.iterdir()] == ["recommendation.json"]


def _full_disk(fd: int) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_atomic_write_replaces_whole(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_text("old")
    files.write_atomic(target, "new")
    assert target.read_text() == "new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["x.json"]


def test_an_error_of_the_path_is_the_users(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="cannot write") as caught:
        files.write_atomic(tmp_path / "file" / "inside.json", "{}", field="output")
    assert caught.value.field == "output" and caught.value.exit_code == 2


def test_a_failed_append_leaves_no_half_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points = tmp_path / "points.jsonl"
    points.write_text('{"budget": 256}\n')
    _Disk(monkeypatch, tmp_path, room=10)  # part of the next line fits, then the disk is full
    with pytest.raises(StorageError):
        files.append_line(points, '{"budget": 512, "pad": "' + "x" * 200 + '"}')
    assert points.read_text() == '{"budget": 256}\n'


def test_the_reserve_lets_one_line_in_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    points, reserve = tmp_path / "points.jsonl", tmp_path / ".reserve"
    files.make_reserve(reserve, size=4096)
    assert reserve.stat().st_size == 4096
    disk = _Disk(monkeypatch, tmp_path, room=0)
    real_unlink = Path.unlink

    def unlink(path: Path, missing_ok: bool = False) -> None:  # freeing the reserve frees room
        if path == reserve:
            disk.room += 4096
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    used = files.append_line(points, '{"budget": 512}', reserve=reserve)
    assert used is True
    assert points.read_text() == '{"budget": 512}\n'
    assert not reserve.exists()
    disk.room = 0  # the disk full again, and no reserve left
    with pytest.raises(StorageError):  # no reserve left: the next line is refused, not cut
        files.append_line(points, '{"budget": 768}', reserve=reserve)
    assert points.read_text() == '{"budget": 512}\n'


def test_check_overwrite_refuses_what_budgettune_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "results.json"
    mine.write_text('{"mine": 1}')
    with pytest.raises(UserError, match="budgettune did not write it") as caught:
        files.check_overwrite(mine, files.json_document_ours, field="output")
    assert caught.value.field == "output"
    ours = tmp_path / "ours.json"
    ours.write_text('{"schema_version": 1, "budgettune_version": "0.1.0"}')
    files.check_overwrite(ours, files.json_document_ours, field="output")  # no error
    with pytest.raises(UserError, match="is a folder"):
        files.check_overwrite(tmp_path, files.json_document_ours, field="output")


def test_a_temporary_file_a_killed_run_left_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    left = tmp_path / f".results.json.{dead}.tmp"
    left.write_text('{"half": ')
    files.write_atomic(target, "{}")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json"]
