from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._foreign import call_foreign, game_seeds
from agenthub.envs.textarena._game import Game, game_spec, known_games, textarena


class TextArenaEnv(Env[list[Message]]):
    """A single-player TextArena game; needs the extra `textarena`.

    `env_id` is TextArena's id (`TowerOfHanoi-v0`, `Sudoku-v0-easy`, `GuessTheNumber-v0`, ...);
    further KEY=VALUE arguments are the game's own (`num_disks=4`). Each reply is one move;
    what the game answers (its messages since the last move, written `[GAME] ...` as
    TextArena writes them, without the whole-transcript wrapper) is the next user message.

    Tasks: `num_tasks` games per split differing by their game seed (`train`: `seed + i`;
    `held_out`: `seed + 1_000_003 + i`), each prompt the game's opening. The reward is the
    game's final reward for the player (1 for a win; puzzles give partial credit at the turn
    limit); `score` is 1.0 for a win, and `extra_logs` has `turn_count` and `invalid_move`.

    Games that need the network (nltk's word lists: Wordle, Hangman, WordLadder,
    WordSearch; a hosted game master: TwentyQuestions, GuessWho) fail each episode with an
    error saying so on a machine without network; `TextArenaEnv.known_ids()` says which.
    """

    def __init__(
        self, *, env_id: str, num_tasks: int = 100, seed: int = 0, **game_kwargs: Any
    ) -> None:
        textarena()
        game_spec(env_id)  # an unknown id fails when the env is made
        self._env_id = env_id
        self._num_tasks = num_tasks
        self._seed = seed
        self._game = Game(env_id, game_kwargs)
        self._kwargs = game_kwargs
        self._playing = False

    @staticmethod
    def known_ids() -> dict[str, bool]:
        """The single-player game ids of the installed TextArena, each mapped to whether it
        runs without network: games that download nltk's word lists, or whose game master
        is a hosted model, map to False."""
        return known_games()

    def tasks(self, split: str = "train") -> Iterator[Task]:
        seeds = game_seeds(split, seed=self._seed, num_tasks=self._num_tasks, env="textarena")
        for i, game_seed in enumerate(seeds):
            yield Task(
                id=f"{self._env_id}/{split}/{i}",
                prompt=self._opening(game_seed),
                metadata={"env_id": self._env_id, "game_seed": game_seed},
            )

    def _opening(self, game_seed: int) -> str:
        """The game's opening text, the task's prompt; a game that cannot start here (no
        network for its word list) gets a plain one, and its episodes fail saying why."""
        try:
            return Game(self._env_id, self._kwargs).reset(game_seed)
        except Exception:
            return f"Play the TextArena game {self._env_id} (game seed {game_seed})."

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        self._playing = False
        game_seed = task.metadata.get("game_seed")
        if not isinstance(game_seed, int):
            game_seed = self._seed if seed is None else seed
        opening = await call_foreign(
            "textarena",
            f"starting {self._env_id} (game seed {game_seed})",
            lambda: self._game.reset(game_seed),
        )
        self._playing = True
        # The task's prompt is the game's opening: it is not said twice.
        observation = [] if opening == task.prompt else _said(opening)
        return observation, {"game_seed": game_seed}

    async def step(self, action: str) -> Step[list[Message]]:
        if not self._playing:
            raise RuntimeError("step() called before reset() or after the episode ended")
        done, text = await call_foreign(
            "textarena", f"playing a move in {self._env_id}", lambda: self._game.step(action)
        )
        if not done:
            return Step(_said(text))
        self._playing = False
        reward, info = await call_foreign(
            "textarena", f"closing {self._env_id}", self._game.outcome
        )
        logs = {
            "turn_count": float(info.get("turn_count", 0)),
            "invalid_move": float(bool(info.get("invalid_move", False))),
        }
        return Step(
            _said(text),
            reward,
            terminated=True,
            info={"reason": str(info.get("reason", ""))},
            score=1.0 if reward >= 1.0 else 0.0,
            extra_logs=logs,
        )

    async def aclose(self) -> None:
        self._playing = False


def _said(text: str) -> list[Message]:
    return [Message(role="user", content=text)] if text else []
