from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agenthub._env import Env
from agenthub._types import Message, Step, Task
from agenthub.envs._tasks import TaskFiles
from agenthub.envs.math._datasets import read_math_jsonl
from agenthub.envs.math._generator import INSTRUCTION, generate_tasks
from agenthub.envs.math._pool import default_pool

FEEDBACK = "Incorrect, try again. " + INSTRUCTION


class MathEnv(Env[list[Message]]):
    """Math problems with answers checked by `agenthub.envs.math.verify`.

    Single-turn by default. With `max_attempts > 1`, a wrong answer is answered with `feedback`
    and another try, up to `max_attempts`; the episode's reward comes on its final attempt:
    `correct_reward * attempt_discount ** (attempt - 1)` when right, `wrong_reward` when the
    attempts run out. `Step.score` is 1.0 or 0.0 (solved or not) whatever the shaping, and
    `extra_logs` has `attempts` and `correct`.

    Tasks: the built-in procedural generator (`num_tasks` per split, `seed`), or JSONL files
    given as `dataset` (split `train`) and `eval_dataset` (`held_out`), in GSM8K, MATH or
    `prompt`/`label` form. `timeout_s` bounds each verification; a timeout counts as wrong.
    """

    def __init__(
        self,
        *,
        dataset: str | None = None,
        eval_dataset: str | None = None,
        num_tasks: int = 1000,
        seed: int = 0,
        max_attempts: int = 1,
        feedback: str = FEEDBACK,
        correct_reward: float = 1.0,
        wrong_reward: float = 0.0,
        attempt_discount: float = 1.0,
        timeout_s: float = 5.0,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self._files = TaskFiles(dataset, eval_dataset)
        self._num_tasks = num_tasks
        self._seed = seed
        self._max_attempts = max_attempts
        self._feedback = feedback
        self._correct_reward = correct_reward
        self._wrong_reward = wrong_reward
        self._discount = attempt_discount
        self._timeout_s = timeout_s
        self._task: Task | None = None
        self._attempt = 0

    def tasks(self, split: str = "train") -> Iterable[Task]:
        path = self._files.of(split, self)
        if path is not None:
            return read_math_jsonl(path)
        return generate_tasks(split, num_tasks=self._num_tasks, seed=self._seed)

    async def reset(
        self, task: Task, *, seed: int | None = None
    ) -> tuple[list[Message], dict[str, Any]]:
        if seed is not None:
            self.reseed(seed)
        self._task = task
        self._attempt = 0
        return [], {}

    async def step(self, action: str) -> Step[list[Message]]:
        task = self._task
        if task is None:
            raise RuntimeError("step() called before reset() or after the episode ended")
        correct = await default_pool().averify(action, str(task.label), timeout_s=self._timeout_s)
        self._attempt += 1
        attempt = self._attempt
        logs = {"attempts": float(attempt), "correct": float(correct)}
        if correct:
            self._task = None
            reward = self._correct_reward * self._discount ** (attempt - 1)
            return Step([], reward, terminated=True, score=1.0, extra_logs=logs)
        if attempt >= self._max_attempts:
            self._task = None
            return Step([], self._wrong_reward, terminated=True, score=0.0, extra_logs=logs)
        feedback = [Message(role="user", content=self._feedback)]
        return Step(feedback, 0.0, extra_logs=logs)

    async def aclose(self) -> None:
        self._task = None
