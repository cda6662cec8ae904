"""`JsonLines`: a JSONL file read lazily through an index of line offsets, as it grows."""

from __future__ import annotations

import json
import os
import threading
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

__all__ = ["JsonLines", "Notice"]

Row = TypeVar("Row")

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Notice:
    """Something in a run the page shows instead of failing on: a bad line, a missing file."""

    file: str
    message: str
    line: int | None = None


class JsonLines(Generic[Row]):
    """The complete lines of a JSONL file, indexed by a background scan that keeps only each
    line's byte offset and a small `Row` made by `summarize(value, index)` (the table's columns).

    Nothing holds the whole file: a page reads its lines by offset. The scan picks up lines
    appended since it last ran (a run still writing) and starts over when the file was rewritten
    (shorter than what was read). A line that is not JSON, or that `summarize` refuses (raises
    `ValueError`), becomes a `Notice` and is skipped; a last line without its newline is a run
    still writing it, shown as a notice and read once it is complete.
    """

    def __init__(self, path: Path, summarize: Callable[[Any, int], Row]) -> None:
        self.path = path
        self._summarize = summarize
        self._lock = threading.Condition()
        self._offsets = array("Q")  # start of each good line
        self._numbers = array("Q")  # and its line number in the file
        self._rows: list[Row] = []
        self._bad: list[Notice] = []
        self._scanned = 0  # bytes read so far: every line before it is indexed
        self._lines_seen = 0
        self._partial = False
        self._identity: tuple[int, int] | None = None
        self._scanner: threading.Thread | None = None

    # --- what the pages ask for

    def refresh(self) -> None:
        """Start a scan of whatever was appended (or rewritten) since the last one."""
        with self._lock:
            if self._scanner is not None and self._scanner.is_alive():
                return
            try:
                stat = self.path.stat()
            except (FileNotFoundError, NotADirectoryError):  # not written (yet)
                return
            identity = (stat.st_dev, stat.st_ino)
            if identity != self._identity or stat.st_size < self._scanned:
                self._reset(identity)
            if stat.st_size == self._scanned:
                return
            self._scanner = threading.Thread(target=self._scan, name="agenthub-view-scan")
            self._scanner.daemon = True
            self._scanner.start()

    def wait_for(self, n: int, timeout: float = 10.0) -> None:
        """Block until `n` good lines are indexed or the scan ends (or `timeout`)."""
        with self._lock:
            self._lock.wait_for(lambda: len(self._rows) >= n or not self.scanning, timeout=timeout)

    @property
    def scanning(self) -> bool:
        return self._scanner is not None and self._scanner.is_alive()

    def rows(self) -> list[Row]:
        """A snapshot of the rows indexed so far, in file order."""
        with self._lock:
            return list(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def notices(self) -> list[Notice]:
        with self._lock:
            found = list(self._bad)
            if self._partial:
                found.append(
                    Notice(
                        self.path.name,
                        "the last line is incomplete (the run may still be writing it); it is "
                        "left out until it is complete",
                        self._lines_seen + 1,
                    )
                )
            return found

    def read(self, index: int) -> Any:
        """The JSON value of the `index`-th good line (0-based)."""
        with self._lock:
            start = self._offsets[index]
        with self.path.open("rb") as file:
            file.seek(start)
            return json.loads(file.readline())

    def line_number(self, index: int) -> int:
        """The 1-based line of the file that good line `index` is (for messages)."""
        with self._lock:
            return self._numbers[index]

    # --- the scan

    def _reset(self, identity: tuple[int, int]) -> None:
        self._identity = identity
        self._offsets = array("Q")
        self._numbers = array("Q")
        self._rows = []
        self._bad = []
        self._scanned = 0
        self._lines_seen = 0
        self._partial = False

    def _scan(self) -> None:
        with self._lock:
            start, seen = self._scanned, self._lines_seen
        with self.path.open("rb") as file:
            file.seek(start)
            for offset, line in _complete_lines(file, start):
                seen += 1
                row, problem = self._row(line) if line.strip() else (None, None)
                with self._lock:
                    if row is not None:
                        self._offsets.append(offset)
                        self._numbers.append(seen)
                        self._rows.append(row)
                    elif problem is not None:
                        self._bad.append(Notice(self.path.name, problem, seen))
                    self._scanned = offset + len(line)
                    self._lines_seen = seen
                    self._lock.notify_all()
            end = file.seek(0, os.SEEK_END)
        with self._lock:
            self._partial = end > self._scanned
            self._lock.notify_all()

    def _row(self, line: bytes) -> tuple[Row | None, str | None]:
        try:
            value = json.loads(line)
        except ValueError as exc:
            return None, f"not JSON ({exc}); the line is skipped"
        try:
            return self._summarize(value, len(self._rows)), None
        except (ValueError, TypeError, KeyError) as exc:
            return None, f"not in the format this view reads ({exc}); the line is skipped"


def _complete_lines(file: Any, start: int) -> Iterator[tuple[int, bytes]]:
    """Each newline-terminated line from `start` on, with its offset; a last line without its
    newline is not yielded."""
    offset, pending = start, b""
    while chunk := file.read(_CHUNK):
        pending += chunk
        begin = 0
        while (end := pending.find(b"\n", begin)) >= 0:
            yield offset, pending[begin : end + 1]
            offset += end + 1 - begin
            begin = end + 1
        pending = pending[begin:]
