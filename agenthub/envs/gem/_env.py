from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._foreign import call_foreign, game_seeds
from agenthub.envs.gem._game import Game, check_id, gem, known_envs


class GemEnv(Env[list[Message]]):
    """An env of gem (gem-llm) made with `gem.make`; needs the extra `gem`.

    `env_id` is gem's id (`game:GuessTheNumber-v0-easy`, `game:Minesweeper-v0-easy`, ...);
    further KEY=VALUE arguments are the env's own. Each reply is one action; the env's
    observation after it (only what is new: gem's wrappers that repeat the history are not
    applied) is the next user message.

    Tasks: `num_tasks` episodes per split differing by the seed given to gem's `reset`
    (`train`: `seed + i`; `held_out`: `seed + 1_000_003 + i`), each prompt the env's opening.
    Each step's reward is gem's; `score` is 1.0 when the episode ends by its own logic with
    gem's success reward (1.0) and `extra_logs` has `turns`. Envs that load datasets from a
    hub when made (gem's math and QA envs) fail each episode saying so where there is no
    network.
    """

    def __init__(
        self, *, env_id: str, num_tasks: int = 100, seed: int = 0, **env_kwargs: Any
    ) -> None:
        gem()
        check_id(env_id)
        self._env_id = env_id
        self._num_tasks = num_tasks
        self._seed = seed
        self._kwargs = env_kwargs
        self._game = Game(env_id, env_kwargs)
        self._turns: int | None = None

    @staticmethod
    def known_ids() -> dict[str, bool]:
        """The env ids of the installed gem, each mapped to whether it runs without network
        (envs that download word lists or load datasets from a hub map to False)."""
        return known_envs()

    def tasks(self, split: str = "train") -> Iterator[Task]:
        seeds = game_seeds(split, seed=self._seed, num_tasks=self._num_tasks, env="gem")
        for i, game_seed in enumerate(seeds):
            yield Task(
                id=f"{self._env_id}/{split}/{i}",
                prompt=self._opening(game_seed),
                metadata={"env_id": self._env_id, "game_seed": game_seed},
            )

    def _opening(self, game_seed: int) -> str:
        """The env's opening text, the task's prompt; an env that cannot start here (no
        network for its dataset) gets a plain one, and its episodes fail saying why."""
        try:
            return Game(self._env_id, self._kwargs).reset(game_seed)
        except Exception:
            return f"Play the gem env {self._env_id} (seed {game_seed})."

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        self._turns = None
        game_seed = task.metadata.get("game_seed")
        if not isinstance(game_seed, int):
            game_seed = self._seed if seed is None else seed
        opening = await call_foreign(
            "gem",
            f"starting {self._env_id} (seed {game_seed})",
            lambda: self._game.reset(game_seed),
        )
        self._turns = 0
        observation = [] if opening == task.prompt else _said(opening)
        return observation, {"game_seed": game_seed}

    async def step(self, action: str) -> Step[list[Message]]:
        if self._turns is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        text, reward, terminated, truncated = await call_foreign(
            "gem", f"playing a move in {self._env_id}", lambda: self._game.step(action)
        )
        self._turns += 1
        if not (terminated or truncated):
            return Step(_said(text), reward)
        logs = {"turns": float(self._turns)}
        self._turns = None
        won = terminated and reward >= 1.0
        return Step(
            _said(text),
            reward,
            terminated=terminated,
            truncated=truncated and not terminated,
            score=1.0 if won else 0.0,
            extra_logs=logs,
        )

    async def aclose(self) -> None:
        self._turns = None


def _said(text: str) -> list[Message]:
    return [Message(role="user", content=text)] if text else []
