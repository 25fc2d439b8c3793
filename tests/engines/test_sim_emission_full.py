"""A full disk under `serve --emission-log` is named against the log, not the port: the rows the
core buffered reach the disk when the log closes, and that failure is the log's."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest

from budgettune.core.errors import StorageError
from budgettune.engines.embedded.server import _close_emission_log


class _FullDisk(io.StringIO):
    def close(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_close_names_the_emission_log() -> None:
    with pytest.raises(StorageError) as caught:
        _close_emission_log(_FullDisk(), Path("/data/e.csv"))
    assert "cannot write /data/e.csv: No space left on device" in caught.value.message
    assert "port" not in caught.value.message  # the file is named, not the address
