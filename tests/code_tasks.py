"""code_exec tasks for tests, written the way a user's task file would give them."""

from __future__ import annotations

from agenthub import Task
from agenthub.envs.code_exec import FunctionTests


def function_task(entry: str, *tests: str, setup: str = "") -> Task:
    """A task asking for `entry`, checked by assert-style `tests` after `setup`."""
    label = FunctionTests(entry_point=entry, setup=setup, tests=tests)
    return Task(id=entry, prompt=f"Write {entry}.", label=label.model_dump(mode="json"))
