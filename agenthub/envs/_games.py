"""What the adapters to other hubs' games (gem, TextArena) share: tasks that differ by a game
seed alone, each prompt the game's opening, and an episode that starts by resetting the game
with its task's seed."""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from agenthub._env import Env
from agenthub._types import Message, Task
from agenthub.envs._foreign import call_foreign, game_seeds

__all__ = ["SeededGameEnv", "near_ids", "said"]


class _Game(Protocol):
    def reset(self, seed: int) -> str: ...


G = TypeVar("G", bound=_Game)


def said(text: str) -> list[Message]:
    """What a game answered, as the next user message (none for no text)."""
    return [Message(role="user", content=text)] if text else []


def near_ids(registry: dict[str, Any], env_id: str) -> str:
    """The ids of `registry` of `env_id`'s family (before its first `-`), else the first 20:
    what an error for an unknown id suggests."""
    family = env_id.split("-")[0]
    near = sorted(i for i in registry if i.split("-")[0] == family) or sorted(registry)[:20]
    return ", ".join(near)


class SeededGameEnv(Env[list[Message]], Generic[G]):
    """A foreign game played one move a reply. Subclasses set `package` (the hub, for seeds
    and errors) and `kind` ("env", "game"), make `self._game`, and write `step`, calling
    `_turn()` first and `_end()` when the episode ends.

    Tasks: `num_tasks` per split differing by the game seed (`train`: `seed + i`;
    `held_out`: `seed + 1_000_003 + i`), each prompt the game's opening; a game that cannot
    start here (no network for its data) gets a plain prompt, and its episodes fail saying
    why."""

    package: ClassVar[str]
    kind: ClassVar[str]

    def __init__(self, env_id: str, num_tasks: int, seed: int, kwargs: dict[str, Any]) -> None:
        self._env_id = env_id
        self._num_tasks = num_tasks
        self._seed = seed
        self._kwargs = kwargs
        self._game: G = self._new_game()
        self._turns: int | None = None  # None: no episode under way

    @abc.abstractmethod
    def _new_game(self) -> G:
        """A game of this env's id and arguments, not started."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        seeds = game_seeds(split, seed=self._seed, num_tasks=self._num_tasks, env=self.package)
        for i, game_seed in enumerate(seeds):
            yield Task(
                id=f"{self._env_id}/{split}/{i}",
                prompt=self._opening(game_seed),
                metadata={"env_id": self._env_id, "game_seed": game_seed},
            )

    def _opening(self, game_seed: int) -> str:
        try:
            return self._new_game().reset(game_seed)
        except Exception:
            return f"Play the {self.package} {self.kind} {self._env_id} (game seed {game_seed})."

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
            self.package,
            f"starting {self._env_id} (game seed {game_seed})",
            lambda: self._game.reset(game_seed),
        )
        self._turns = 0
        # The task's prompt is the game's opening: it is not said twice.
        observation = [] if opening == task.prompt else said(opening)
        return observation, {"game_seed": game_seed}

    def _turn(self) -> int:
        """Count a move of the episode under way; the moves so far, this one included."""
        if self._turns is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        self._turns += 1
        return self._turns

    def _end(self) -> None:
        self._turns = None

    async def aclose(self) -> None:
        self._end()
