from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from agenthub._env import Env
from agenthub._types import Message, ObsT, Step, Task
from agenthub.wrappers._base import Wrapper


@dataclass
class StepRecord:
    action: str
    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


@dataclass
class EpisodeRecord:
    task: Task
    seed: int | None
    observation: Any
    steps: list[StepRecord] = field(default_factory=list)

    @property
    def episode_return(self) -> float:
        return sum(s.reward for s in self.steps)

    def to_json(self) -> str:
        return json.dumps(_episode_adapter.dump_python(self, mode="json"))


_episode_adapter = TypeAdapter(EpisodeRecord)


def _plain(observation: object) -> Any:
    if isinstance(observation, list):
        return [m.model_dump() if isinstance(m, Message) else m for m in observation]
    return observation


class Recorder(Wrapper[ObsT]):
    """Keep every episode's text-level record in `episodes`, and append it to `path` as one
    JSON line when the episode ends (or the env is closed mid-episode)."""

    def __init__(self, env: Env[ObsT], path: str | Path | None = None) -> None:
        super().__init__(env)
        self.path = Path(path) if path is not None else None
        self.episodes: list[EpisodeRecord] = []
        self._open: EpisodeRecord | None = None

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[ObsT, dict[str, Any]]:
        self._flush()
        observation, info = await self.env.reset(task, seed=seed)
        self._open = EpisodeRecord(task=task, seed=seed, observation=_plain(observation))
        self.episodes.append(self._open)
        return observation, info

    async def step(self, action: str) -> Step[ObsT]:
        result = await self.env.step(action)
        if self._open is not None:
            self._open.steps.append(
                StepRecord(
                    action=action,
                    observation=_plain(result.observation),
                    reward=result.reward,
                    terminated=result.terminated,
                    truncated=result.truncated,
                    info=dict(result.info),
                )
            )
            if result.done:
                self._flush()
        return result

    async def aclose(self) -> None:
        self._flush()
        await self.env.aclose()

    def _flush(self) -> None:
        if self._open is not None and self.path is not None:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(self._open.to_json() + "\n")
        self._open = None
