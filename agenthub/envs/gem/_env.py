from __future__ import annotations

from typing import Any

from agenthub._types import Message, Step
from agenthub.envs._foreign import call_foreign
from agenthub.envs._games import SeededGameEnv, said
from agenthub.envs.gem._game import Game, check_id, gem, known_envs


class GemEnv(SeededGameEnv[Game]):
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

    package = "gem"
    kind = "env"

    def __init__(
        self, *, env_id: str, num_tasks: int = 100, seed: int = 0, **env_kwargs: Any
    ) -> None:
        gem()
        check_id(env_id)
        super().__init__(env_id, num_tasks, seed, env_kwargs)

    def _new_game(self) -> Game:
        return Game(self._env_id, self._kwargs)

    @staticmethod
    def known_ids() -> dict[str, bool]:
        """The env ids of the installed gem, each mapped to whether it runs without network
        (envs that download word lists or load datasets from a hub map to False)."""
        return known_envs()

    async def step(self, action: str) -> Step[list[Message]]:
        turns = self._turn()
        text, reward, terminated, truncated = await call_foreign(
            "gem", f"playing a move in {self._env_id}", lambda: self._game.step(action)
        )
        if not (terminated or truncated):
            return Step(said(text), reward)
        self._end()
        won = terminated and reward >= 1.0
        return Step(
            said(text),
            reward,
            terminated=terminated,
            truncated=truncated and not terminated,
            score=1.0 if won else 0.0,
            extra_logs={"turns": float(turns)},
        )
