"""How a build reports its phases and its SFT loss: a seam with a silent and a rich display."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["BuildProgress", "RichBuildProgress", "SilentBuildProgress"]


class BuildProgress(Protocol):
    """Told about each phase of a build as it starts, and about each SFT step."""

    def phase(self, name: str, total: int | None = None) -> None:
        """A new phase begins (the previous one is done); `total` steps when it has steps."""

    def advance(self, loss: float | None = None) -> None:
        """One step of the current phase is done; `loss` is the SFT loss of that step."""


class SilentBuildProgress:
    def phase(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, loss: float | None = None) -> None:
        pass


class RichBuildProgress:
    """One line per phase on stderr, with a bar and the running loss for the SFT phase.
    `transient`: the lines go when it stops (for a build on the way to something else)."""

    def __init__(self, console: Console | None = None, *, transient: bool = False) -> None:
        self._progress = Progress(
            SpinnerColumn(finished_text="[green]done[/green]"),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[loss]}"),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=transient,
        )
        self._current: TaskID | None = None
        self._total = 1

    def __enter__(self) -> RichBuildProgress:
        return self  # the display starts with the first phase: a cached model shows nothing

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self._finish()
        if self._progress.live.is_started:
            self._progress.stop()

    def phase(self, name: str, total: int | None = None) -> None:
        if not self._progress.live.is_started:
            self._progress.start()
        self._finish()
        console = self._progress.console
        if not console.is_terminal:
            # A bar is drawn only on a terminal: elsewhere (a log, CI) say what is under way.
            console.print(f"{name} ...", highlight=False)
        self._total = total or 1
        self._current = self._progress.add_task(name, total=self._total, loss="")

    def advance(self, loss: float | None = None) -> None:
        if self._current is not None:
            shown = "" if loss is None else f"loss {loss:.3f}"
            self._progress.update(self._current, advance=1, loss=shown)

    def _finish(self) -> None:
        if self._current is not None:
            self._progress.update(self._current, completed=self._total)
