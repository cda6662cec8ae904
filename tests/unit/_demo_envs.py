"""Procedural environments whose tasks carry `metadata["reference"]`, like the built-in ones,
so the default model's builder can be tested without them."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from agenthub import Env, Message, Step, Task, register


class ArithmeticEnv(Env[list[Message]]):
    """Add two numbers; the answer goes in \\boxed{}."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        rng = random.Random(split)
        for i in range(100_000):
            a, b = rng.randrange(100), rng.randrange(100)
            yield Task(
                id=f"{split}-{i}",
                prompt=f"What is {a} + {b}? Put the final answer in \\boxed{{}}.",
                label=str(a + b),
                metadata={"reference": f"{a} + {b} = {a + b}. The answer is \\boxed{{{a + b}}}."},
            )

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        self.reseed(seed)
        self.gold = task.label
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        return Step([], float(f"\\boxed{{{self.gold}}}" in action), terminated=True)


class EchoEnv(ArithmeticEnv):
    """Repeat a word; some tasks carry no reference and must be skipped."""

    def tasks(self, split: str = "train") -> Iterator[Task]:
        for i, word in enumerate(["apple", "river", "stone", "cloud"] * 50):
            metadata = {"reference": word} if i % 2 else {}
            yield Task(id=f"{split}-{i}", prompt=f"Say {word}.", metadata=metadata)


class RuledEchoEnv(EchoEnv):
    """Echo, its rule in a system prompt."""

    system_prompt = "Repeat the word, nothing else."


class NoReferenceEnv(ArithmeticEnv):
    def tasks(self, split: str = "train") -> Iterator[Task]:
        yield Task(id="t", prompt="hello")


class NoTasksEnv(Env[list[Message]]):
    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        return Step([], 0.0, terminated=True)


def register_demo_envs() -> None:
    for name, attr in [
        ("test_arith", "ArithmeticEnv"),
        ("test_echo", "EchoEnv"),
        ("test_ruled_echo", "RuledEchoEnv"),
        ("test_no_reference", "NoReferenceEnv"),
        ("test_no_tasks", "NoTasksEnv"),
    ]:
        register(name, f"{__name__}:{attr}", override=True)
