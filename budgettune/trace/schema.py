"""The in-memory trace: one request per row, columnar numpy arrays, plus the report of its loading.

A :class:`Trace` is plain validated data; readers in :mod:`budgettune.trace.formats` build it,
:mod:`budgettune.trace.replay` turns it into a send schedule.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from budgettune.core.errors import TraceError

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def plural(count: int, noun: str) -> str:
    """``"1 row"``, ``"2 rows"``, ``"1,234 requests"``: a count with its noun."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


@dataclass(slots=True, frozen=True)
class SharedBlocks:
    """Each request's leading prompt blocks of ``block_tokens`` tokens that other requests hold
    too (Mooncake's ``hash_ids``), as a ragged array: request i's are
    ``ids[offsets[i]:offsets[i + 1]]``. An id stands for its block's tokens and every block
    before it (a node of the traffic's prefix tree), so two requests hold the same tokens up to a
    block's end exactly when they hold its id; a request's tokens past its ids are its own. The
    last block is cut at the prompt's end."""

    offsets: IntArray
    ids: IntArray
    block_tokens: int

    def __post_init__(self) -> None:
        if len(self.offsets) < 1 or self.offsets[0] != 0 or self.offsets[-1] != len(self.ids):
            raise ValueError("SharedBlocks.offsets must run from 0 to len(ids)")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def from_lists(cls, blocks: list[list[int]], block_tokens: int) -> SharedBlocks:
        lengths = np.array([len(ids) for ids in blocks], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = [block for ids in blocks for block in ids]
        return cls(offsets, np.array(flat, dtype=np.int64), block_tokens)

    def of(self, index: int) -> IntArray:
        """Request ``index``'s block ids, in prompt order."""
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    def shared_tokens(self, prompt_tokens: IntArray) -> IntArray:
        """Each request's tokens within its shared blocks (at most its prompt)."""
        return np.minimum(np.diff(self.offsets) * self.block_tokens, prompt_tokens)

    def take(self, index: npt.ArrayLike) -> SharedBlocks:
        """The rows at ``index`` (an index array or a boolean mask), in that order."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        lengths = np.diff(self.offsets)[idx]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        starts = self.offsets[:-1][idx]
        positions = np.repeat(starts - offsets[:-1], lengths) + np.arange(int(offsets[-1]))
        return SharedBlocks(offsets, self.ids[positions], self.block_tokens)


@dataclass(slots=True, frozen=True)
class TraceRequest:
    """One request of a trace. ``arrival_s`` is None for a lengths-only trace; prefix_group -1
    means no shared prefix (then prefix_tokens is 0)."""

    prompt_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    prefix_group: int = -1
    prefix_tokens: int = 0


@dataclass(slots=True, frozen=True)
class Trace:
    """Parallel arrays, one row per request.

    arrival_s: seconds from the first request (first = 0.0), non-decreasing; None when the
    source has no timestamps. prefix_group / prefix_tokens: requests of one group >= 0 share
    their first prefix_tokens prompt tokens (as in :class:`~budgettune.trace.schedule.Schedule`).
    source / format: where it came from, for messages and results.
    """

    prompt_tokens: IntArray
    output_tokens: IntArray
    arrival_s: FloatArray | None = None
    prefix_group: IntArray | None = None
    prefix_tokens: IntArray | None = None
    source: str = ""
    format: str = ""
    # Exact shared blocks where the format records them (Mooncake): preferred to the groups,
    # which then only approximate them (for formats that hold one prefix per request).
    shared_blocks: SharedBlocks | None = None

    def __post_init__(self) -> None:
        n = len(self.prompt_tokens)
        for name in (
            "output_tokens",
            "arrival_s",
            "prefix_group",
            "prefix_tokens",
            "shared_blocks",
        ):
            column = getattr(self, name)
            if column is not None and len(column) != n:
                raise ValueError(f"Trace.{name} has {len(column)} rows, prompt_tokens has {n}")
        if (self.prefix_group is None) != (self.prefix_tokens is None):
            raise ValueError("Trace.prefix_group and prefix_tokens come together")

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    @property
    def has_arrivals(self) -> bool:
        return self.arrival_s is not None

    @property
    def has_prefixes(self) -> bool:
        return self.prefix_group is not None

    def __getitem__(self, index: int) -> TraceRequest:
        return TraceRequest(
            prompt_tokens=int(self.prompt_tokens[index]),
            output_tokens=int(self.output_tokens[index]),
            arrival_s=None if self.arrival_s is None else float(self.arrival_s[index]),
            prefix_group=-1 if self.prefix_group is None else int(self.prefix_group[index]),
            prefix_tokens=0 if self.prefix_tokens is None else int(self.prefix_tokens[index]),
        )

    def __iter__(self) -> Iterator[TraceRequest]:
        for index in range(len(self)):
            yield self[index]

    def take(self, index: npt.ArrayLike) -> Trace:
        """The rows at ``index`` (an index array or a boolean mask), in that order."""
        idx = np.asarray(index)

        def pick(column: npt.NDArray[np.generic] | None) -> npt.NDArray[np.generic] | None:
            return None if column is None else column[idx]

        return Trace(
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            arrival_s=pick(self.arrival_s),  # type: ignore[arg-type]
            prefix_group=pick(self.prefix_group),  # type: ignore[arg-type]
            prefix_tokens=pick(self.prefix_tokens),  # type: ignore[arg-type]
            source=self.source,
            format=self.format,
            shared_blocks=None if self.shared_blocks is None else self.shared_blocks.take(idx),
        )

    @classmethod
    def from_requests(
        cls, requests: list[TraceRequest], *, source: str = "", format: str = ""
    ) -> Trace:
        """Build a trace from row objects (tests, small programs). Arrivals are kept only when
        every request has one; they are used as given (not re-zeroed or sorted)."""
        arrivals = [r.arrival_s for r in requests]
        has_prefix = any(r.prefix_group >= 0 for r in requests)
        return cls(
            prompt_tokens=np.array([r.prompt_tokens for r in requests], dtype=np.int64),
            output_tokens=np.array([r.output_tokens for r in requests], dtype=np.int64),
            arrival_s=(
                np.array(arrivals, dtype=np.float64)
                if requests and all(a is not None for a in arrivals)
                else None
            ),
            prefix_group=(
                np.array([r.prefix_group for r in requests], dtype=np.int64) if has_prefix else None
            ),
            prefix_tokens=(
                np.array([r.prefix_tokens for r in requests], dtype=np.int64)
                if has_prefix
                else None
            ),
            source=source,
            format=format,
        )


@dataclass(slots=True, frozen=True)
class LoadReport:
    """What loading a trace did besides reading it: rows skipped (with the reason), timestamps
    that went backwards (then sorted), prompts clipped or dropped for --max-model-len, warnings."""

    path: str
    format: str
    requests: int
    skipped: tuple[tuple[str, int], ...] = ()
    out_of_order: int = 0
    clipped: int = 0
    dropped: int = 0
    max_model_len: int | None = None
    warnings: tuple[str, ...] = field(default=())
    sha256: str | None = None  # of the bytes read (a pipe's too, read once)

    def summary(self) -> str:
        """One line for terminals: "1,234 requests (azure); skipped 3 rows with ...; clipped 2"."""
        parts = [f"{plural(self.requests, 'request')} ({self.format})"]
        parts += [
            f"skipped {plural(count, 'row')} with {reason}"
            for reason, count in self.skipped
            if count
        ]
        if self.out_of_order:
            parts.append(f"sorted {self.out_of_order:,} out-of-order timestamps")
        if self.clipped:
            parts.append(f"clipped {self.clipped:,} longer than max-model-len {self.max_model_len}")
        if self.dropped:
            parts.append(f"dropped {self.dropped:,} longer than max-model-len {self.max_model_len}")
        line = "; ".join(parts)
        if self.clipped or self.dropped:  # the load counts the file; a --window replays less
            line += " (counts over the whole file, before --window/--requests/--duration)"
        return line


@dataclass(slots=True, frozen=True)
class RowLocation:
    """Where a row sits in its file: its ``line``, or for a single JSON document (vllm-bench)
    no line and the list index in the field's name (``input_lens[3]``)."""

    line: int | None
    field: str

    def __str__(self) -> str:
        """``line 12`` or ``input_lens[3]``, for warnings."""
        return f"line {self.line}" if self.line is not None else self.field

    def in_file(self, path: str) -> str:
        """``trace.csv:12`` or ``bench.json input_lens[3]``."""
        return f"{path}:{self.line}" if self.line is not None else f"{path} {self.field}"

    def error(self, message: str, path: str, *, hint: str | None = None) -> TraceError:
        """A TraceError about this row of ``path``."""
        return TraceError(message, path=path, line=self.line, field=self.field, hint=hint)


@dataclass(slots=True)
class RawRows:
    """Columns as read, one entry per row, before the common checks. ``line_numbers`` holds the
    file line of each row, or for a single JSON document (vllm-bench) the list index, in which
    case ``indexed`` is True and messages say ``field[index]`` instead of a line."""

    prompt: IntArray
    output: IntArray
    line_numbers: IntArray
    prompt_field: str
    output_field: str
    arrival_s: FloatArray | None = None
    arrival_field: str = ""
    prefix_group: IntArray | None = None
    prefix_tokens: IntArray | None = None
    skipped: list[tuple[str, int]] = field(default_factory=list)
    indexed: bool = False
    shared_blocks: SharedBlocks | None = None

    def where(self, row: int, field_name: str) -> RowLocation:
        """Where ``row`` (an index into these arrays) is in the file, for ``field_name``."""
        if self.indexed:
            return RowLocation(None, f"{field_name}[{int(self.line_numbers[row])}]")
        return RowLocation(int(self.line_numbers[row]), field_name)

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where ``mask`` is true (in place)."""
        self.prompt = self.prompt[mask]
        self.output = self.output[mask]
        self.line_numbers = self.line_numbers[mask]
        if self.arrival_s is not None:
            self.arrival_s = self.arrival_s[mask]
        if self.prefix_group is not None and self.prefix_tokens is not None:
            self.prefix_group = self.prefix_group[mask]
            self.prefix_tokens = self.prefix_tokens[mask]
        if self.shared_blocks is not None:
            self.shared_blocks = self.shared_blocks.take(mask)
