"""An agenthub env as TRL's `GRPOTrainer` takes it: a dataset of the env's tasks and a reward
function that plays each completion through the env."""

from __future__ import annotations

import asyncio
import importlib
import itertools
from collections.abc import Sequence
from typing import Any

from agenthub._registry import make
from agenthub._returns import READ_AHEAD, checked_tasks
from agenthub._types import Task

__all__ = ["EnvReward", "train_dataset"]

TASK_COLUMN = "agenthub_task"


def train_dataset(
    env_id: str, *, split: str = "train", num_examples: int | None = None, **env_kwargs: Any
) -> Any:
    """The env's tasks of `split` as a `datasets.Dataset` for `GRPOTrainer(train_dataset=)`:
    `prompt` (the task's chat messages, led by the env's system prompt) and `agenthub_task`
    (the task as JSON, which `EnvReward` reads back)."""
    dataset_class = importlib.import_module("datasets").Dataset  # a dependency of TRL
    env = make(env_id, **env_kwargs)
    limit = min(num_examples or READ_AHEAD, READ_AHEAD)
    tasks = itertools.islice(checked_tasks(env.tasks(split)), limit)
    return dataset_class.from_list(
        [
            {
                "prompt": [m.model_dump() for m in task.messages(env.system_prompt)],
                TASK_COLUMN: task.model_dump_json(),
            }
            for task in tasks
        ]
    )


class EnvReward:
    """`GRPOTrainer(reward_funcs=[EnvReward("math")])`: each completion is the reply to its
    row's task, stepped once through a fresh env; its reward is the env's. For single-reply
    envs (`math`, `code_exec` with `max_turns=1`, a judge): an env that would go on after the
    reply has its episode cut there, and its reward so far counts. TRL logs it under
    `rewards/agenthub_<env_id>`."""

    def __init__(self, env_id: str, **env_kwargs: Any) -> None:
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.__name__ = f"agenthub_{env_id}"

    async def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float]:
        tasks = kwargs.get(TASK_COLUMN)
        if tasks is None:
            raise ValueError(
                f"EnvReward({self.env_id!r}) needs the dataset's {TASK_COLUMN} column: build "
                "the dataset with agenthub.integrations.trl.train_dataset"
            )
        plays = (
            self._play(Task.model_validate_json(t), _text(c))
            for t, c in zip(tasks, completions, strict=True)
        )
        return list(await asyncio.gather(*plays))

    async def _play(self, task: Task, reply: str) -> float:
        env = make(self.env_id, **self.env_kwargs)
        try:
            await env.reset(task)
            return (await env.step(reply)).reward
        finally:
            await env.aclose()


def _text(completion: Any) -> str:
    """A completion as text: TRL's conversational completions are message lists."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")
