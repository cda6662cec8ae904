"""Environments for the REPL's tests: a seeded guessing game that can be made to raise."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agenthub import Env, Message, Step, Task


class GuessEnv(Env[list[Message]]):
    """Guess the secret number, drawn from the reset seed; a reply saying 'boom' makes it raise."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        for i, top in enumerate((10, 100, 1000)):
            yield Task(id=f"{split}-{i}", prompt=f"Guess my number from 1 to {top}.", label=top)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.reseed(seed)
        assert isinstance(task.label, int)
        self.secret = int(self.np_random.integers(1, task.label + 1))
        self.guesses = 0
        return [Message(role="user", content="Your first guess?")], {"top": task.label}

    async def step(self, action: str) -> Step[list[Message]]:
        if "boom" in action:
            raise RuntimeError("the env blew up on purpose")
        if "gym" in action:
            return ([], 0.0, False, False, {})  # type: ignore[return-value]
        self.guesses += 1
        found = re.search(r"-?\d+", action)
        if found is None:
            reply, reward = "Say a number.", 0.0
        else:
            guess = int(found.group())
            if guess == self.secret:
                return Step([], 1.0, terminated=True, info={"guesses": self.guesses})
            reply, reward = ("Higher." if guess < self.secret else "Lower."), 0.0
        return Step(
            [Message(role="user", content=reply)],
            reward,
            truncated=self.guesses >= 8,
            info={"guesses": self.guesses},
        )


class BrokenResetEnv(GuessEnv):
    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        raise OSError("the env cannot reach its data")


class ObservationOnlyResetEnv(GuessEnv):
    async def reset(  # type: ignore[override]
        self, task: Task, *, seed: int | None = None
    ) -> list[Message]:
        return [Message(role="user", content="Your first guess?")]


class RuledGuessEnv(GuessEnv):
    """Guesses, told the rules in a system message."""

    system_prompt = "Guess with one number."


class RulesBugEnv(GuessEnv):
    """Its system prompt is a property with a bug."""

    @property  # type: ignore[override]
    def system_prompt(self) -> str:
        raise KeyError("rules")


class StopAtEqualsEnv(GuessEnv):
    """Guesses end where the model writes '='."""

    stop = ("=",)


class CalcEnv(Env[str]):
    """Plain-text arithmetic: the model writes a sum up to '=', the env writes its value after
    it, and the next reply ends the episode."""

    stop = ("=",)

    def tasks(self, split: str = "train") -> Iterator[Task]:
        yield Task(id=f"{split}-0", prompt="Multiply.")

    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.turns = 0
        return "\n", {}

    async def step(self, action: str) -> Step[str]:
        self.turns += 1
        if self.turns > 1:
            return Step("", 1.0, terminated=True)
        a, _, b = action.rstrip("=").partition("*")
        return Step(f" [calc] {int(a) * int(b)}\n", 0.0)


class TrainOnlyEnv(GuessEnv):
    """A common slip: `tasks` looks its split up in a dict that holds only 'train'."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        seeds = {"train": 0}
        yield Task(id=f"{split}-{seeds[split]}", prompt="Guess my number from 1 to 10.", label=10)


class NoTasksEnv(GuessEnv):
    """An env that brings no tasks of its own: they come from a task file."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        return Env.tasks(self, split)  # type: ignore[return-value]


class LevelledGuessEnv(GuessEnv):
    """A guessing game with a ceiling of its own.

    Args:
        top: the largest number it draws
    """

    def __init__(self, top: int = 10, max_turns: int | None = 5) -> None:
        super().__init__()
        self.top, self.max_turns = top, max_turns


class LevelledFromFilesEnv(LevelledGuessEnv):
    """The README's pattern: new arguments of its own, the rest passed on to the base class."""

    def __init__(self, train: str, **settings: Any) -> None:
        super().__init__(**settings)
        self.train = train
