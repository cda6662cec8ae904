from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic

import numpy as np

from agenthub._env import Env
from agenthub._spec import EnvSpec
from agenthub._types import ObsT, Step, Task


class Wrapper(Env[ObsT], Generic[ObsT]):
    """An environment that delegates to `env`; override only what the wrapper changes."""

    def __init__(self, env: Env[ObsT]) -> None:
        self.env = env

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[ObsT, dict[str, Any]]:
        return await self.env.reset(task, seed=seed)

    async def step(self, action: str) -> Step[ObsT]:
        return await self.env.step(action)

    async def aclose(self) -> None:
        await self.env.aclose()

    def tasks(self, split: str = "train") -> Iterable[Task]:
        return self.env.tasks(split)

    @property
    def spec(self) -> EnvSpec | None:
        return self.env.spec

    @spec.setter
    def spec(self, value: EnvSpec | None) -> None:
        self.env.spec = value

    @property
    def tools(self) -> Sequence[Mapping[str, Any]]:
        return self.env.tools

    @tools.setter
    def tools(self, value: Sequence[Mapping[str, Any]]) -> None:
        self.env.tools = value

    @property
    def stop(self) -> Sequence[str]:
        return self.env.stop

    @stop.setter
    def stop(self, value: Sequence[str]) -> None:
        self.env.stop = value

    @property
    def system_prompt(self) -> str | None:
        return self.env.system_prompt

    @system_prompt.setter
    def system_prompt(self, value: str | None) -> None:
        self.env.system_prompt = value

    @property
    def np_random(self) -> np.random.Generator:
        return self.env.np_random

    def reseed(self, seed: int | None) -> None:
        self.env.reseed(seed)

    @property
    def unwrapped(self) -> Env[Any]:
        return self.env.unwrapped

    def __str__(self) -> str:
        return f"<{type(self).__name__}{self.env}>"
