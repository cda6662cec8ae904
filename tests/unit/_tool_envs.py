"""A tool-using env for tests: a calculator whose functions are plain, async and failing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agenthub import Env, Message, Step, Task
from agenthub.tools import ToolEnv


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


async def multiply(a: float, b: float = 2.0) -> float:
    """Multiply two numbers."""
    return a * b


def divide(a: float, b: float) -> dict[str, float]:
    """Divide a by b."""
    return {"quotient": a / b}


class Calculator(ToolEnv):
    """Answer arithmetic questions; the label is the answer."""

    functions = (add, multiply, divide)
    max_turns = 3

    def tasks(self, split: str = "train") -> Iterator[Task]:
        yield Task(id=f"{split}-0", prompt="What is 2 + 3? Use the tools.", label=5)
        yield Task(id=f"{split}-1", prompt="What is 6 * 7? Use the tools.", label=42)
        yield Task(id=f"{split}-2", prompt="What is 9 / 3? Use the tools.", label=3)

    async def score(self, task: Task, answer: str) -> float:
        return 1.0 if str(task.label) in answer else 0.0


class BadTools(Env[list[Message]]):
    """Offers a Python function where a JSON schema belongs."""

    tools = (add,)  # type: ignore[assignment]

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        return Step([], 1.0, terminated=True)
