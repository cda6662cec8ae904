from __future__ import annotations

from typing import Any

from agenthub._env import Env
from agenthub._types import ObsT, Step, Task
from agenthub.wrappers._base import Wrapper


class TurnLimit(Wrapper[ObsT]):
    """Truncate the episode after `max_turns` steps unless it terminated on its own."""

    def __init__(self, env: Env[ObsT], max_turns: int) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        super().__init__(env)
        self.max_turns = max_turns
        self._turns = 0

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[ObsT, dict[str, Any]]:
        self._turns = 0
        return await self.env.reset(task, seed=seed)

    async def step(self, action: str) -> Step[ObsT]:
        result = await self.env.step(action)
        self._turns += 1
        if self._turns >= self.max_turns and not result.done:
            return Step(
                result.observation,
                result.reward,
                terminated=False,
                truncated=True,
                info={**result.info, "truncated_by": "turn_limit"},
                score=result.score,
                extra_logs=result.extra_logs,
            )
        return result
