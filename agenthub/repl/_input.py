"""Turning typed lines into REPL entries: commands, multi-line actions, a bare Enter."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Command", "Enter", "Entry", "EntryReader", "TypedAction", "FENCE"]

FENCE = '"""'


@dataclass(frozen=True, slots=True)
class Command:
    """`:name args...`"""

    name: str
    args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TypedAction:
    """A reply the person typed, to send to the env."""

    text: str


@dataclass(frozen=True, slots=True)
class Enter:
    """An empty line on its own: steps a loaded replay, otherwise does nothing."""


Entry = Command | TypedAction | Enter


class EntryReader:
    """Collects lines into entries.

    A line starting with `:` is a command. Any other text starts an action, which an empty
    line ends. An action that itself holds blank lines goes between two lines of `\"\"\"`
    (which also sends an empty action: `\"\"\"` then `\"\"\"`).
    """

    def __init__(self) -> None:
        self._lines: list[str] | None = None
        self._fenced = False

    @property
    def continuing(self) -> bool:
        """Whether the next line continues an action."""
        return self._lines is not None

    @property
    def continuation_prompt(self) -> str:
        return f"...{FENCE} " if self._fenced else "... "

    def feed(self, line: str) -> Entry | None:
        """Take one line; return an entry when one is complete."""
        if self._lines is None:
            if line.startswith(":"):
                words = line[1:].split()
                return Command(words[0].lower(), tuple(words[1:])) if words else Enter()
            if line.strip() == FENCE:
                self._lines, self._fenced = [], True
                return None
            if not line.strip():
                return Enter()
            self._lines, self._fenced = [line], False
            return None
        ends = line.strip() == FENCE if self._fenced else not line.strip()
        if not ends:
            self._lines.append(line)
            return None
        text = "\n".join(self._lines)
        self.cancel()
        return TypedAction(text)

    def cancel(self) -> None:
        """Drop a half-typed action (Ctrl-C)."""
        self._lines, self._fenced = None, False
