"""`agenthub repl`: step through an environment by hand, as a person or with a model, and see
the episode token by token exactly as the trainer would get it.

`Repl` holds the logic and writes to a rich `Console`, so it runs without a terminal (tests
feed it lines); `run_terminal` drives it from a terminal with readline history and completion.
"""

from agenthub.repl._core import EngineFactory, Repl, probe_env
from agenthub.repl._episode import Action, Episode, TokenKind, typed_action
from agenthub.repl._input import COMMANDS, Command, Enter, Entry, EntryReader, TypedAction
from agenthub.repl._replay import Replay
from agenthub.repl._tasks import TaskSource
from agenthub.repl._terminal import run_terminal

__all__ = [
    "COMMANDS",
    "Action",
    "Command",
    "EngineFactory",
    "Enter",
    "Entry",
    "EntryReader",
    "Episode",
    "Repl",
    "Replay",
    "TaskSource",
    "TokenKind",
    "TypedAction",
    "probe_env",
    "run_terminal",
    "typed_action",
]
