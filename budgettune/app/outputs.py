"""Where a command writes: its output folder checked before any work starts, so that a mistake
in ``-o`` costs nothing and nothing the user wrote is overwritten. The files each command writes
are named here with how to tell that budgettune wrote an existing one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from budgettune.artifacts.results import RESULTS_FILE
from budgettune.core.errors import UserError, shorten
from budgettune.core.files import check_overwrite, json_document_ours

REPORT_FILE = "report.html"


def report_page_ours(head: bytes) -> bool:
    """A page budgettune wrote (see :func:`budgettune.report.html.is_report_page`)."""
    from budgettune.report.html import is_report_page  # plotly loads with the report

    return is_report_page(head)


# results.json and report.html: what replay -o and simulate -o write into their folder
RESULTS_FOLDER: Mapping[str, Callable[[bytes], bool]] = {
    RESULTS_FILE: json_document_ours,
    REPORT_FILE: report_page_ours,
}


def claim_folder(
    folder: Path, files: Mapping[str, Callable[[bytes], bool]], *, field: str = "output"
) -> None:
    """Check that ``folder`` can take ``files``: not a file itself, and each of them either
    absent or one budgettune wrote (``files`` maps a name to how to tell). Raises UserError
    naming ``field``. Creates nothing."""
    try:
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder} is a file; name a folder to write into", field=field)
        for name, ours in files.items():
            check_overwrite(folder / name, ours, field=field)
    except OSError as error:  # a name the file system cannot hold (ENAMETOOLONG), a loop
        raise UserError(
            f"cannot use {shorten(str(folder))}: {error.strerror or error}", field=field
        ) from None
