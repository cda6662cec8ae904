"""Small environments used by the unit tests: one that keeps the contract, and ways to break it."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import numpy as np

from agenthub import Env, Message, Step, Task


class CountdownEnv(Env[list[Message]]):
    """Say a number; the env counts down from the task's label and ends at zero."""

    def __init__(self, delay_s: float = 0.0) -> None:
        """Args:
        delay_s: seconds each reset and step wait first
        """
        self.delay_s = delay_s
        self.remaining: int | None = None
        self.closed = 0

    def tasks(self, split: str = "train") -> Iterator[Task]:
        for i in range(3):
            yield Task(id=f"{split}-{i}", prompt="Count down with me.", label=i + 2)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.reseed(seed)
        await anyio.sleep(self.delay_s)
        assert isinstance(task.label, int)
        self.remaining = task.label
        return [Message(role="user", content=f"Start at {self.remaining}.")], {}

    async def step(self, action: str) -> Step[list[Message]]:
        await anyio.sleep(self.delay_s)
        if self.remaining is None:
            raise RuntimeError("reset first")
        self.remaining -= 1
        noise = int(self.np_random.integers(0, 1000))
        return Step(
            [Message(role="user", content=f"{self.remaining} (noise {noise})")],
            reward=1.0 if self.remaining == 0 else 0.0,
            terminated=self.remaining == 0,
            info={"remaining": self.remaining},
        )

    async def aclose(self) -> None:
        self.closed += 1


class EndlessEnv(CountdownEnv):
    async def step(self, action: str) -> Step[list[Message]]:
        return Step([], 0.0)


class UnseededEnv(CountdownEnv):
    def reseed(self, seed: int | None) -> None:
        super().reseed(None)


class GlobalRandomEnv(CountdownEnv):
    """Draws its noise from the `random` module: seeded by nobody, so replays differ."""

    async def step(self, action: str) -> Step[list[Message]]:
        step = await super().step(action)
        return Step(
            [Message(role="user", content=f"{self.remaining} (noise {random.randrange(10**6)})")],
            step.reward,
            step.terminated,
            info=step.info,
        )


class GlobalNumpyRandomEnv(CountdownEnv):
    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        _, info = await super().reset(task, seed=seed)
        return [Message(role="user", content=f"start {np.random.randint(10**6)}")], info


class BadInfoEnv(CountdownEnv):
    async def step(self, action: str) -> Step[list[Message]]:
        step = await super().step(action)
        return Step(step.observation, step.reward, step.terminated, info={"obj": object()})


class RaisingEnv(CountdownEnv):
    async def step(self, action: str) -> Step[list[Message]]:
        if action == "":
            raise ValueError("cannot parse an empty reply")
        return await super().step(action)


class WrongObservationEnv(CountdownEnv):
    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        await super().reset(task, seed=seed)
        return {"text": "hi"}, {}


class CloseOnceEnv(CountdownEnv):
    async def aclose(self) -> None:
        if self.closed:
            raise RuntimeError("already closed")
        self.closed += 1


class BrokenAfterCancelEnv(CountdownEnv):
    """Marks itself busy across an await and never clears the flag if cancelled there."""

    busy = False

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if self.busy:
            raise RuntimeError("reset while busy")
        self.busy = True
        await anyio.lowlevel.checkpoint()
        result = await super().reset(task, seed=seed)
        self.busy = False
        return result


class SyncStepEnv(CountdownEnv):
    """Its author forgot `async`."""

    def step(self, action: str) -> Step[list[Message]]:  # type: ignore[override]
        return Step([], 1.0, terminated=True)


class BlockingEnv(CountdownEnv):
    """Blocks the event loop for `block_s` seconds, once, in the method named `where`."""

    def __init__(self, where: str, block_s: float = 0.5) -> None:
        super().__init__()
        self.where = where
        self.block_s = block_s

    def block_once(self, where: str) -> None:
        if where == self.where:
            self.where = ""
            time.sleep(self.block_s)

    def tasks(self, split: str = "train") -> Iterator[Task]:
        self.block_once("tasks")
        return super().tasks(split)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.block_once("reset")
        return await super().reset(task, seed=seed)

    async def step(self, action: str) -> Step[list[Message]]:
        await anyio.lowlevel.checkpoint()
        self.block_once("step")
        return await super().step(action)

    async def aclose(self) -> None:
        self.block_once("aclose")
        await super().aclose()


class StallingTasksEnv(CountdownEnv):
    """Its task source yields two tasks, then blocks for good (a read without a timeout)."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        yield from itertools.islice(super().tasks(split), 2)
        time.sleep(1e6)


class SyncHttpEnv(CountdownEnv):
    """Its step calls a server with a synchronous client, as a careless env does."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    async def step(self, action: str) -> Step[list[Message]]:
        httpx.get(self.url, timeout=10)  # noqa: ASYNC210 - the blocking call under test
        return await super().step(action)


def turn_limited_countdown() -> Any:
    """A registered factory that wraps the env itself."""
    from agenthub.wrappers import TurnLimit

    return TurnLimit(CountdownEnv(), max_turns=2)


def factory_returning(value: object) -> Any:
    return value


def factory_raising(error: str, message: str) -> Any:
    """Fails the way a constructor does when a file or service it needs is missing."""
    raise {
        "RuntimeError": RuntimeError,
        "FileNotFoundError": FileNotFoundError,
        "KeyboardInterrupt": KeyboardInterrupt,
    }[error](message)


class BuggyInit(Env[str]):
    """A constructor with a bug of its own: `int(None)` raises a TypeError inside it."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = int(limit)  # type: ignore[arg-type]

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return "", {}

    async def step(self, action: str) -> Step[str]:
        return Step("", 0.0, terminated=True)


class AsyncTasksEnv(CountdownEnv):
    """Its tasks come from an async generator, which nothing outside an event loop can read."""

    async def tasks(self, split: str = "train"):  # type: ignore[no-untyped-def,override]
        yield Task(id="0", prompt="Count down with me.", label=2)


class SeedlessResetEnv(CountdownEnv):
    """A `reset` without the `seed` keyword agenthub passes."""

    async def reset(self, task: Task):  # type: ignore[no-untyped-def,override]
        return await super().reset(task)


class IdlessTaskEnv(CountdownEnv):
    """Its tasks lack the `id` every Task needs."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        yield Task(prompt="Count down with me.", label=2)  # type: ignore[call-arg]


class DictTasksEnv(CountdownEnv):
    """Its tasks are dicts, not Tasks."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        yield {"id": "0", "prompt": "Count down with me."}  # type: ignore[misc]
