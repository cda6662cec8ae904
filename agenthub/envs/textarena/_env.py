from __future__ import annotations

from typing import Any

from agenthub._types import Message, Step
from agenthub.envs._foreign import call_foreign
from agenthub.envs._games import SeededGameEnv, said
from agenthub.envs.textarena._game import Game, game_spec, known_games, textarena


class TextArenaEnv(SeededGameEnv[Game]):
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

    package = "textarena"
    kind = "game"

    def __init__(
        self, *, env_id: str, num_tasks: int = 100, seed: int = 0, **game_kwargs: Any
    ) -> None:
        textarena()
        game_spec(env_id)  # an unknown id fails when the env is made
        super().__init__(env_id, num_tasks, seed, game_kwargs)

    def _new_game(self) -> Game:
        return Game(self._env_id, self._kwargs)

    @staticmethod
    def known_ids() -> dict[str, bool]:
        """The single-player game ids of the installed TextArena, each mapped to whether it
        runs without network: games that download nltk's word lists, or whose game master
        is a hosted model, map to False."""
        return known_games()

    async def step(self, action: str) -> Step[list[Message]]:
        self._turn()
        done, text = await call_foreign(
            "textarena", f"playing a move in {self._env_id}", lambda: self._game.step(action)
        )
        if not done:
            return Step(said(text))
        self._end()
        reward, info = await call_foreign(
            "textarena", f"closing {self._env_id}", self._game.outcome
        )
        logs = {
            "turn_count": float(info.get("turn_count", 0)),
            "invalid_move": float(bool(info.get("invalid_move", False))),
        }
        return Step(
            said(text),
            reward,
            terminated=True,
            info={"reason": str(info.get("reason", ""))},
            score=1.0 if reward >= 1.0 else 0.0,
            extra_logs=logs,
        )
