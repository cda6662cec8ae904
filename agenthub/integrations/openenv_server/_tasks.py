"""Which task a reset plays: the env's own tasks of a split, read once (up to `READ_AHEAD`),
by index or in a round that every reset without an index moves on."""

from __future__ import annotations

import itertools
from typing import Any

import anyio

from agenthub._env import Env
from agenthub._errors import NoTaskSourceError
from agenthub._registry import make
from agenthub._returns import READ_AHEAD, checked_tasks
from agenthub._tracebacks import described
from agenthub._types import Task
from agenthub.integrations.openenv_server._errors import ServeError, aclose_logged

__all__ = ["TaskRound"]


class TaskRound:
    def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        self._env_id = env_id
        self._env_kwargs = env_kwargs
        self._splits: dict[str, list[Task]] = {}
        self._next: dict[str, int] = {}
        self._lock = anyio.Lock()

    async def pick(self, split: str, index: int | None) -> Task:
        tasks = self._splits.get(split)  # read once; no lock on every reset after that
        if tasks is None:
            tasks = await self._read(split)
        if not tasks:
            raise ServeError(400, "VALIDATION_ERROR", f"split {split!r} of {self._env_id} is empty")
        if index is None:
            index = self._next.get(split, 0)
            self._next[split] = (index + 1) % len(tasks)
        elif index >= len(tasks):
            raise ServeError(
                400,
                "VALIDATION_ERROR",
                f"task_index {index}: split {split!r} has {len(tasks)} tasks "
                f"(read up to {READ_AHEAD}); give 0..{len(tasks) - 1}",
            )
        return tasks[index]

    async def _read(self, split: str) -> list[Task]:
        async with self._lock:
            if split not in self._splits:
                env = await anyio.to_thread.run_sync(lambda: make(self._env_id, **self._env_kwargs))
                try:
                    self._splits[split] = await anyio.to_thread.run_sync(_read, env, split)
                finally:
                    await aclose_logged(env, None)
            return self._splits[split]


def _read(env: Env[Any], split: str) -> list[Task]:
    try:
        return list(itertools.islice(checked_tasks(env.tasks(split)), READ_AHEAD))
    except NoTaskSourceError as exc:
        raise ServeError(
            400,
            "VALIDATION_ERROR",
            f"{exc} Give the task itself in reset: "
            '{"task": {"id": ..., "prompt": ..., "label": ...}}',
        ) from exc
    except Exception as exc:
        raise ServeError(
            500,
            "EXECUTION_ERROR",
            f"env_error: the env's tasks({split!r}) raised {described(exc)}",
            cause="env_error",
        ) from exc
