"""The REPL in a terminal: readline history and completion, Ctrl-C and Ctrl-D."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Coroutine
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from rich.text import Text

from agenthub.repl._core import Repl
from agenthub.repl._input import completions

__all__ = ["history_file", "run_terminal"]


def history_file() -> Path:
    """`$AGENTHUB_CACHE_DIR/repl_history`, else under `$XDG_CACHE_HOME/agenthub` or
    `~/.cache/agenthub` (where the default model is cached too)."""
    if root := os.environ.get("AGENTHUB_CACHE_DIR"):
        return Path(root) / "repl_history"
    return (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "agenthub"
        / "repl_history"
    )


T = TypeVar("T")


class _Loop:
    """One event loop for the whole session (a model loaded by `:gen` lives on it), run one
    entry at a time. Ctrl-C during an entry cancels it and raises `KeyboardInterrupt`; a
    second Ctrl-C raises it at once, which also stops code that blocks the loop (an env that
    calls `time.sleep`, say), where a cancellation never gets to run."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        task = self.loop.create_task(coro)
        interrupted = False

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            nonlocal interrupted
            if interrupted:
                raise KeyboardInterrupt
            interrupted = True
            self.loop.call_soon_threadsafe(task.cancel)

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            return self.loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
        finally:
            signal.signal(signal.SIGINT, previous)

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


def run_terminal(repl: Repl) -> int:
    """Read lines until `:quit` or Ctrl-D; return the exit code: 1 when the input was piped
    and an entry failed, else 0."""
    history = _setup_readline()
    runner = _Loop()
    # Piped input is not echoed by the terminal: show it, so the transcript reads as a session.
    echo = not sys.stdin.isatty()
    try:
        runner.run(repl.start())
        while True:
            try:
                line = input(repl.prompt)
            except EOFError:
                repl.console.print()
                if repl.typing:
                    # The input ended inside an action: send it, as the empty line would.
                    runner.run(repl.feed(""))
                break
            except KeyboardInterrupt:
                repl.cancel_input()
                repl.console.print()
                continue
            if echo:
                repl.console.print(line, markup=False, highlight=False)
            try:
                if not runner.run(repl.feed(line)):
                    break
            except KeyboardInterrupt:
                repl.console.print(Text("interrupted", style="bold red"))
    finally:
        runner.run(repl.aclose())
        runner.close()
        if history is not None:
            _save_history(history)
    if echo and repl.failures:
        # A scripted session is checked by its exit code, as a shell script would be.
        plural = "entry" if repl.failures == 1 else "entries"
        repl.console.print(Text(f"{repl.failures} {plural} failed (see above)", style="bold red"))
        return 1
    return 0


def _setup_readline() -> object | None:
    try:
        import readline
    except ImportError:  # no readline on this platform: plain input() still works
        return None

    def complete(text: str, state: int) -> str | None:
        line = readline.get_line_buffer()[: readline.get_endidx()]
        matches = completions(line, text)
        return matches[state] if state < len(matches) else None

    readline.set_completer(complete)
    readline.set_completer_delims(" \t\n")
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")
    with contextlib.suppress(OSError):
        history_file().parent.mkdir(parents=True, exist_ok=True)
        readline.read_history_file(history_file())
    readline.set_history_length(2000)
    return readline


def _save_history(readline: object) -> None:
    with contextlib.suppress(OSError):
        readline.write_history_file(history_file())  # type: ignore[attr-defined]
