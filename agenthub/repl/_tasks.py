"""Where the REPL's tasks come from: a JSONL file, or the env's own split."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agenthub._env import Env
from agenthub._errors import AgentHubError, NoTaskSourceError
from agenthub._returns import checked_tasks
from agenthub._tracebacks import raised
from agenthub._types import Task

__all__ = ["TaskSource"]

# An env's task source may be endless; a task id is looked for among this many per split.
SEARCH_LIMIT = 100_000


class TaskSource:
    """Tasks by index (`--task N`) and by id (to replay a saved trajectory)."""

    def __init__(
        self,
        make_env: Callable[[], Env[Any]],
        *,
        tasks_file: str | None,
        split: str,
        env_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._make_env = make_env
        self.tasks_file = tasks_file
        self.split = split
        self._env_kwargs = env_kwargs or {}

    def describe(self) -> str:
        return self.tasks_file or f"split {self.split!r}"

    async def get(self, index: int) -> Task:
        if index < 0:
            raise AgentHubError(f"--task must be 0 or more, got {index}")
        found = await self._scan(self.split, lambda tasks: itertools.islice(tasks, index + 1))
        if len(found) <= index:
            raise AgentHubError(
                f"task {index} does not exist: {self.describe()} has {len(found)} tasks; "
                f"pick --task 0..{len(found) - 1}"
            )
        return found[index]

    async def find(self, task_id: str) -> Task | None:
        """The task with this id: in the file, else in the current split, then the other."""
        splits = [self.split, *(s for s in ("train", "held_out") if s != self.split)]
        for split in splits[: 1 if self.tasks_file else None]:
            found = await self._scan(
                split,
                lambda tasks: itertools.islice((t for t in tasks if t.id == task_id), 1),
                limit=SEARCH_LIMIT,
            )
            if found:
                return found[0]
        return None

    async def _scan(
        self,
        split: str,
        pick: Callable[[Iterable[Task]], Iterable[Task]],
        *,
        limit: int | None = None,
    ) -> list[Task]:
        if self.tasks_file:
            try:
                tasks = _read_tasks(self.tasks_file, self._env_kwargs)
                return list(pick(itertools.islice(tasks, limit)))
            except ValueError as exc:  # a malformed line: say which, as the reader does
                raise AgentHubError(f"--tasks {self.tasks_file}: {exc}") from exc
        env = self._make_env()
        try:
            return list(pick(itertools.islice(checked_tasks(env.tasks(split)), limit)))
        except NoTaskSourceError as exc:
            raise AgentHubError(f"{exc} Give one with --tasks FILE.") from exc
        except AgentHubError:
            raise
        except Exception as exc:  # the env's bug, not the REPL's: say where it is
            raise AgentHubError(raised(f"the env's tasks({split!r})", exc)) from exc
        finally:
            await env.aclose()


def _read_tasks(file: str, env_kwargs: Mapping[str, Any]) -> Iterator[Task]:
    from agenthub.envs._tasks import read_task_file

    if not Path(file).is_file():
        raise AgentHubError(f"--tasks {file}: no such file")
    return read_task_file(file, env_kwargs)
