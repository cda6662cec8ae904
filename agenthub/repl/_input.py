"""What the person types: lines into entries, the commands, `:set`, Tab completion."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

from agenthub._errors import AgentHubError
from agenthub.agents import SamplingParams

__all__ = [
    "COMMANDS",
    "ENTRY_HELP",
    "FENCE",
    "SETTINGS",
    "Command",
    "Enter",
    "Entry",
    "EntryReader",
    "TypedAction",
    "completions",
    "parse_setting",
]

FENCE = '"""'
COMMANDS = {
    "gen": ":gen                 let the model write the next action (and send it)",
    "set": ":set [KEY VALUE]     show or change sampling: temperature, top_p, top_k, "
    "max_tokens, seed (a number or none)",
    "tokens": ":tokens [ids]        the episode as the trainer sees it, token by token",
    "reset": ":reset [N]           start the episode again (on task N)",
    "undo": ":undo                take back the last step (replays the episode from its seed)",
    "save": ":save FILE           append the trajectory to FILE as one JSON line",
    "load": ":load FILE [LINE]    replay a saved trajectory (default: the last line); Enter steps",
    "stop": ":stop                end a replay and go on by hand",
    "help": ":help                this help",
    "quit": ":quit                leave (also Ctrl-D)",
}
SETTINGS = ("temperature", "top_p", "top_k", "max_tokens", "seed")
ENTRY_HELP = (
    "Type an action and end it with an empty line; for an action with blank lines, put it "
    'between two lines of """. Ctrl-C drops what you typed.'
)


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


def parse_setting(sampling: SamplingParams, args: tuple[str, ...]) -> SamplingParams:
    """`sampling` with `:set KEY VALUE` applied."""
    if len(args) != 2 or args[0] not in SETTINGS:
        raise AgentHubError(f":set KEY VALUE with KEY one of {', '.join(SETTINGS)}")
    key, raw = args
    value: float | int | None
    try:
        if key == "seed":
            value = None if raw.lower() == "none" else int(raw)
        else:
            value = float(raw) if key in ("temperature", "top_p") else int(raw)
        return sampling.replace(**{key: value})
    except ValueError as exc:
        raise AgentHubError(f":set {key} {raw}: {exc}") from exc


def completions(line: str, text: str) -> list[str]:
    """What Tab offers for the word `text` that ends `line` (the line up to the cursor):
    commands, `:set`'s keys, and file names after `:save` and `:load`."""
    words = line[: len(line) - len(text)].split()
    if not words:
        return [f":{n} " for n in COMMANDS if f":{n}".startswith(text)] if text[:1] == ":" else []
    if words == [":set"]:
        return [f"{key} " for key in SETTINGS if key.startswith(text)]
    if words in ([":save"], [":load"]):
        found = sorted(glob.glob(os.path.expanduser(text) + "*"))
        return [f"{f}/" if os.path.isdir(f) else f"{f} " for f in found]
    return []
