from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._foreign import foreign_failure, game_seeds
from agenthub.envs.openenv._sessions import (
    Answer,
    InProcessSession,
    ServerSession,
    Session,
    action_class_of,
    load_class,
    openenv,
)

PROMPT = "Each reply you write is sent to the environment as your action."


class OpenEnvEnv(Env[list[Message]]):
    """An OpenEnv environment, served or in-process; needs the extra `openenv`.

    A running server given by `base_url` (reached over its WebSocket, one session per
    episode), or an `Environment` class run in this process, `env=package.module:Class` (its
    Action type read from its `Environment[Action, ...]` declaration, or given as
    `action=package.module:Class`).

    Each reply becomes the Action's `action_field` (default `message`); the observation,
    after OpenEnv's `done`, `reward` and `metadata`, becomes the next user message: its
    `observation_field` where one is named, else its fields as JSON. The reward is
    OpenEnv's (0 where it gives none); `score` is 1.0 when the episode ends with a reward of
    at least 1.0.

    Tasks: `num_tasks` per split with `prompt` as their prompt, differing by the seed given to
    OpenEnv's reset (`train`: `seed + i`; `held_out`: `seed + 1_000_003 + i`); `reset_kwargs`
    go to every reset.
    """

    def __init__(
        self,
        *,
        base_url: str | None = None,
        env: str | None = None,
        action: str | None = None,
        action_field: str = "message",
        observation_field: str | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        prompt: str = PROMPT,
        num_tasks: int = 100,
        seed: int = 0,
        timeout_s: float = 60.0,
    ) -> None:
        openenv()
        if (base_url is None) == (env is None):
            raise ValueError(
                "give one of base_url=URL (a running OpenEnv server) or "
                "env=package.module:Class (an OpenEnv Environment to run in this process)"
            )
        self._where = base_url or str(env)
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._classes: tuple[type[Any], type[Any]] | None = None
        if env is not None:
            env_class = load_class(env, "env")
            action_class = load_class(action, "action") if action else action_class_of(env_class)
            self._classes = (env_class, action_class)
        self._action_field = action_field
        self._observation_field = observation_field
        self._reset_kwargs = dict(reset_kwargs or {})
        self._prompt = prompt
        self._num_tasks = num_tasks
        self._seed = seed
        self._session: Session | None = None

    def tasks(self, split: str = "train") -> Iterator[Task]:
        seeds = game_seeds(split, seed=self._seed, num_tasks=self._num_tasks, env="openenv")
        for i, episode_seed in enumerate(seeds):
            yield Task(
                id=f"openenv/{split}/{i}",
                prompt=self._prompt,
                metadata={"seed": episode_seed},
            )

    def _new_session(self) -> Session:
        if self._classes is not None:
            return InProcessSession(*self._classes)
        assert self._base_url is not None
        return ServerSession(self._base_url, self._timeout_s)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        await self.aclose()
        episode_seed = task.metadata.get("seed")
        if not isinstance(episode_seed, int):
            episode_seed = self._seed if seed is None else seed
        try:
            self._session = self._new_session()
            answer = await self._session.reset(seed=episode_seed, **self._reset_kwargs)
        except Exception as exc:
            await self.aclose()
            raise foreign_failure("openenv", f"resetting {self._where}", exc) from exc
        return self._said(answer), {"seed": episode_seed}

    async def step(self, action: str) -> Step[list[Message]]:
        session = self._session
        if session is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        try:
            answer = await session.step({self._action_field: action})
        except Exception as exc:
            await self.aclose()
            raise foreign_failure("openenv", f"stepping {self._where}", exc) from exc
        reward = answer.reward or 0.0
        if not answer.done:
            return Step(self._said(answer), reward)
        await self.aclose()
        return Step(
            self._said(answer), reward, terminated=True, score=1.0 if reward >= 1.0 else 0.0
        )

    def _said(self, answer: Answer) -> list[Message]:
        observation = {k: v for k, v in answer.observation.items() if k != "metadata"}
        if self._observation_field is not None:
            if self._observation_field not in observation:
                raise ValueError(
                    f"observation_field={self._observation_field!r} is not a field of "
                    f"{self._where}'s observation; it has: {', '.join(sorted(observation))}"
                )
            text = str(observation[self._observation_field])
        else:
            text = json.dumps(observation, sort_keys=True, default=str)
        return [Message(role="user", content=text)] if text else []

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.aclose()
