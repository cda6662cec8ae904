"""An agenthub env as a verifiers 0.4 environment (the `verifiers.v1` API): a `Taskset` of
the env's tasks and an `Env` whose `run` relays between the policy's interaction and the
agenthub env. verifiers loads both from this module by its id (it exports one of each), so
`vf-eval` and prime-rl find them as they find any v1 taskset package."""

from __future__ import annotations

import importlib
import itertools
import sys
from collections.abc import Iterator
from typing import Any

from pydantic import Field

from agenthub._env import Env as AgentHubEnvBase
from agenthub._registry import make
from agenthub._returns import READ_AHEAD, checked_tasks
from agenthub._types import Message, Task

vf: Any = importlib.import_module("verifiers.v1")  # imported only under verifiers 0.4

__all__ = ["AgentHubEnv", "AgentHubTaskset"]

# verifiers imports a taskset by id as a top-level module (an installed taskset package):
# this module is listed under that name when an environment is built from it.
TASKSET_ID = "agenthub_taskset"
REWARD = "agenthub_reward"
SCORE = "agenthub_score"


class AgentHubTaskData(vf.TaskData):  # type: ignore[misc]
    agenthub_task: str = ""
    """The agenthub `Task` as JSON, which the episode resets the env on."""


class AgentHubTask(vf.Task[AgentHubTaskData, vf.State, vf.TaskConfig]):  # type: ignore[misc]
    pass


class AgentHubTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    env: str = ""
    """The agenthub env id (or `package.module:Class`)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """The env's constructor arguments."""
    split: str = "held_out"
    num_examples: int | None = None
    """The first this many tasks of `split` (at most agenthub's read-ahead)."""


class AgentHubTaskset(vf.Taskset[AgentHubTask, AgentHubTasksetConfig]):  # type: ignore[misc]
    """The env's `split` tasks, each prompt the task's chat messages."""

    def load(self) -> Iterator[AgentHubTask]:
        env = make(self.config.env, **self.config.env_kwargs)
        limit = min(self.config.num_examples or READ_AHEAD, READ_AHEAD)
        for task in itertools.islice(checked_tasks(env.tasks(self.config.split)), limit):
            data = AgentHubTaskData(
                id=task.id,
                prompt=[_dict(m) for m in task.messages(env.system_prompt)],
                agenthub_task=task.model_dump_json(),
            )
            yield AgentHubTask(data)


class AgentHubEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    agent: vf.AgentConfig = vf.AgentConfig()
    """The policy's seat."""


class AgentHubEnv(vf.Env[AgentHubEnvConfig]):  # type: ignore[misc]
    """One episode: a fresh agenthub env, reset on the task; the policy's replies step it
    until it is `terminated` or `truncated` (or the policy's run ends). The trace's reward
    `agenthub_reward` is the sum of the env's step rewards, its metric `agenthub_score` the
    env's score (the reward's sum where the env gives none)."""

    async def run(self, task: Any, agents: Any) -> None:
        config: AgentHubTasksetConfig = self.taskset.config
        env = make(config.env, **config.env_kwargs)
        try:
            await self._play(env, task, agents)
        finally:
            await env.aclose()

    async def _play(self, env: AgentHubEnvBase[Any], task: Any, agents: Any) -> None:
        first, _info = await env.reset(Task.model_validate_json(task.data.agenthub_task))
        prompt = [*task.data.prompt, *_messages(first)]
        opened = type(task)(task.data.model_copy(update={"prompt": prompt}), task.config)
        rewards: list[float] = []
        score: float | None = None
        async with agents.agent.interaction(opened) as talk:
            segment = await talk.turn()
            while not segment.terminated:
                step = await env.step(segment.last_reply)
                rewards.append(step.reward)
                score = step.score if step.score is not None else score
                if step.done:
                    break
                segment = await talk.turn(_messages(step.observation))
        talk.trace.record_reward(REWARD, sum(rewards))
        talk.trace.record_metric(SCORE, sum(rewards) if score is None else score)


def v1_environment(
    env_id: str, *, split: str = "held_out", num_examples: int | None = None, **env_kwargs: Any
) -> Any:
    """A verifiers v1 `Env` playing agenthub's `env_id` (built with `env_kwargs`) on the
    first `num_examples` tasks of `split`."""
    sys.modules.setdefault(TASKSET_ID, sys.modules[__name__])
    taskset = AgentHubTasksetConfig(
        id=TASKSET_ID, env=env_id, env_kwargs=env_kwargs, split=split, num_examples=num_examples
    )
    return AgentHubEnv(AgentHubEnvConfig(taskset=taskset))


def _dict(message: Message) -> dict[str, Any]:
    return message.model_dump(exclude_none=True)


def _messages(observation: object) -> list[dict[str, Any]]:
    """The env's answer as chat messages: a text answer becomes a user message."""
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}] if observation else []
    return [_dict(m) for m in observation]  # type: ignore[attr-defined]
