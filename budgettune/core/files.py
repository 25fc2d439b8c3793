"""Every file budgettune writes goes through here, so that a crash, a kill or a full disk never
leaves half of one, and nothing the user wrote is overwritten.

- :func:`write_atomic` and :func:`atomic_writer`: a temporary file beside the target, written,
  flushed and fsynced, then renamed over it (and the folder fsynced): the target is the old file
  or the new one, never part of either; a failed write leaves no temporary file behind.
- :func:`append_line`: one line appended and fsynced; a write that fails is cut back off, so
  the file never ends in half a line. A ``reserve`` file (:func:`make_reserve`) holds space for
  that line on a disk that fills: it is given up to let the line in.
- :func:`check_overwrite`: an existing file is replaced only when budgettune wrote it (the
  caller says how to tell).

A failure of the machine (disk full, quota, I/O error, file too large) raises StorageError
(exit 1); one of the path the user gave (a folder that is a file, no permission) UserError
(exit 2), naming ``field``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, TextIO, cast

from budgettune.core.auth import hide_given, secrets_given
from budgettune.core.errors import BudgettuneError, StorageError, UserError, shorten

# errno values that say the machine, not the path, is to blame
MACHINE_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS, errno.ENOMEM}
)
# A path's own faults, the user's to change: a name too long, a file where a folder is meant,
# a folder where a file is meant, a loop of links.
USER_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ENOTDIR, errno.EISDIR, errno.ELOOP})
RESERVE_BYTES = 256 << 10  # room kept for one points.jsonl line on a disk that fills


def storage_error(error: OSError, path: Path | str, *, field: str | None = None) -> Exception:
    """The error to raise for ``error`` while writing ``path``: StorageError for the machine's
    failures, UserError (naming ``field``) for the path's."""
    reason = error.strerror or str(error)
    if error.errno in MACHINE_ERRNOS:
        hint = (
            "free some space and run it again"
            if error.errno in (errno.ENOSPC, errno.EDQUOT)
            else None
        )
        return StorageError(f"cannot write {path}: {reason}", path=str(path), hint=hint)
    return UserError(f"cannot write {path}: {reason}", field=field)


def os_error(error: OSError) -> BudgettuneError:
    """The one-line error for an OSError that reached the command line unhandled: the path it
    names (a name too long for the file system, a file where a folder was meant) is the
    user's to change, anything else is the machine's."""
    path = shorten(str(error.filename)) if error.filename is not None else "a file"
    reason = error.strerror or str(error)
    if error.errno in MACHINE_ERRNOS or error.errno not in USER_PATH_ERRNOS:
        return StorageError(f"cannot use {path}: {reason}", path=path)
    return UserError(f"cannot use {path}: {reason}")


def stdout_or_error(what: str) -> TextIO:
    """Standard output to write ``what`` to; StorageError when it is closed (``>&-``), so the
    command ends in one line rather than a traceback (its files are written by then)."""
    if sys.stdout is None:
        raise StorageError(f"standard output is closed: {what} was not written", path="-")
    return sys.stdout


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temporary(path: Path) -> Path:
    """The temporary file beside ``path`` for this process; one a killed budgettune left
    (``.NAME.PID.tmp`` of a process that is gone) is removed first."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2 : -4]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            stale.unlink(missing_ok=True)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_writer(
    path: Path, *, binary: bool = False, field: str | None = None, newline: str | None = None
) -> Iterator[IO[Any]]:
    """A handle to write ``path`` through (its folder must exist: see :func:`make_folder`): on a
    clean exit the text is fsynced and renamed over ``path``; on any error the temporary file is
    removed and ``path`` left as it was. OSError becomes StorageError or UserError (see
    :func:`storage_error`)."""
    tmp = _temporary(path)
    try:
        handle = open(tmp, "wb" if binary else "w", encoding=None if binary else "utf-8",  # noqa: SIM115
                      newline=newline)  # fmt: skip
    except OSError as error:
        raise storage_error(error, path, field=field) from None
    try:
        with handle:
            yield handle if binary or not secrets_given() else cast(IO[Any], _Hiding(handle))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise storage_error(error, path, field=field) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


class _Hiding:
    """A text handle that writes every secret the command was given as ``***`` (a JSON or CSV
    writer writes a value in one piece, so a secret is never split across two writes)."""

    def __init__(self, handle: IO[Any]) -> None:
        self._handle = handle

    def write(self, text: str) -> int:
        return self._handle.write(hide_given(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)


def make_folder(folder: Path, *, field: str | None = None) -> None:
    """Create ``folder`` and its parents (for a writer whose output may be new); OSError
    becomes StorageError or UserError (see :func:`storage_error`)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise storage_error(error, folder, field=field) from None


def write_atomic(path: Path, data: str | bytes, *, field: str | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_writer`); returns ``path``."""
    with atomic_writer(path, binary=isinstance(data, bytes), field=field) as handle:
        handle.write(data)
    return path


def make_reserve(path: Path, size: int = RESERVE_BYTES) -> None:
    """Hold ``size`` bytes of disk in ``path`` (written, not sparse), for :func:`append_line`.
    Raises StorageError when even that does not fit."""
    with atomic_writer(path, binary=True) as handle:
        handle.write(b"\0" * size)


def append_line(path: Path, line: str, *, reserve: Path | None = None) -> bool:
    """Append ``line`` (a newline added) to ``path`` and fsync it. A write the disk cannot take
    is cut back off; then, with a ``reserve``, the reserve is removed and the line written into
    the space it held. Returns True when the reserve was used (the disk is full: the caller
    should stop); raises StorageError (or UserError) when the line could not be written."""
    data = (hide_given(line).rstrip("\n") + "\n").encode("utf-8")
    try:
        _append(path, data)
        return False
    except OSError as error:
        if error.errno not in MACHINE_ERRNOS or reserve is None or not reserve.exists():
            raise storage_error(error, path) from None
    reserve.unlink()
    try:
        _append(path, data)
    except OSError as error:
        raise storage_error(error, path) from None
    return True


def _append(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)  # no half line left behind
                os.fsync(fd)
            raise
    finally:
        os.close(fd)


def check_overwrite(
    path: Path, ours: Callable[[bytes], bool], *, field: str, what: str = "file"
) -> None:
    """Refuse (UserError naming ``field``) to write ``path`` over a folder, or over a file that
    ``ours`` (given its first 4 KiB) does not recognise as one budgettune wrote."""
    if not os.path.lexists(path):
        return
    if path.is_dir():
        raise UserError(f"{path} is a folder; name a {what} to write", field=field)
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}", field=field) from None
    if not ours(head):
        raise UserError(
            f"{path} exists and budgettune did not write it; not overwriting it",
            field=field,
            hint="choose another path, or remove the file first",
        )


def json_document_ours(head: bytes) -> bool:
    """A JSON document budgettune wrote: an object that records the budgettune version."""
    return head.lstrip()[:1] == b"{" and b'"budgettune_version"' in head
