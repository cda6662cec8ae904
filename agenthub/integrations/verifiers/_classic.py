"""An agenthub env as a verifiers environment (the classic API, `verifiers.legacy` of
verifiers 0.3), so that `vf-eval` and prime-rl run it: verifiers samples each reply, the env
steps on it in `env_response`, and the rubric reads the env's rewards."""

from __future__ import annotations

import functools
import importlib
import itertools
from typing import Any

from agenthub._env import Env
from agenthub._registry import make
from agenthub._returns import READ_AHEAD, checked_tasks
from agenthub._types import Message, Task
from agenthub.envs.verifiers._bridge import legacy

__all__ = ["classic_environment"]

ENV_KEY = "agenthub_env"
REWARDS_KEY = "agenthub_rewards"
SCORE_KEY = "agenthub_score"


def classic_environment(
    env_id: str,
    *,
    num_examples: int | None = None,
    max_turns: int = -1,
    **env_kwargs: Any,
) -> Any:
    """A verifiers `MultiTurnEnv` playing agenthub's `env_id` (built with `env_kwargs`).

    Its dataset is the env's `train` tasks and its eval dataset the `held_out` ones (the first
    `num_examples` of each, at most `READ_AHEAD`), each row's prompt the task's chat messages.
    Each rollout builds its own env, resets it on the row's task and steps it on every reply;
    the env's `terminated` or `truncated` ends the rollout. The rubric's reward is the sum of
    the env's step rewards; its `agenthub_score` metric the env's score. `max_turns` is only a
    safety net: a reply cut off by it is never stepped.
    """
    vf = legacy()
    probe = make(env_id, **env_kwargs)
    limit = min(num_examples or READ_AHEAD, READ_AHEAD)
    datasets = {split: _rows(probe, split, limit) for split in ("train", "held_out")}
    tools = [dict(tool["function"]) for tool in probe.tools] or None
    rubric = vf.Rubric(funcs=[agenthub_reward, agenthub_score], weights=[1.0, 0.0])
    return environment_class()(
        env_id=env_id,
        env_kwargs=env_kwargs,
        dataset=datasets["train"],
        eval_dataset=datasets["held_out"],
        rubric=rubric,
        max_turns=max_turns,
        tool_defs=tools,
    )


def _rows(env: Env[Any], split: str, limit: int) -> Any:
    Dataset = importlib.import_module("datasets").Dataset  # verifiers' own dependency
    tasks = itertools.islice(checked_tasks(env.tasks(split)), limit)
    rows = [
        {
            "prompt": [_dict(m) for m in task.messages(env.system_prompt)],
            "answer": "",
            "info": {"agenthub_task": task.model_dump_json()},
        }
        for task in tasks
    ]
    return Dataset.from_list(rows)


def _dict(message: Message) -> dict[str, Any]:
    return message.model_dump()


def _messages(observation: object) -> list[dict[str, Any]]:
    """The env's answer as chat messages: a text answer becomes a user message."""
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}] if observation else []
    return [_dict(m) for m in observation]  # type: ignore[attr-defined]


def agenthub_reward(state: dict[str, Any], **kwargs: Any) -> float:
    return float(sum(state.get(REWARDS_KEY, ())))


def agenthub_score(state: dict[str, Any], **kwargs: Any) -> float:
    score = state.get(SCORE_KEY)
    return agenthub_reward(state) if score is None else float(score)


@functools.cache
def environment_class() -> type[Any]:
    """The `MultiTurnEnv` subclass, made once from the installed verifiers."""
    vf = legacy()

    class AgentHubEnv(vf.MultiTurnEnv):  # type: ignore[misc, name-defined]
        def __init__(self, *, env_id: str, env_kwargs: dict[str, Any], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.agenthub_env_id = env_id
            self.agenthub_env_kwargs = env_kwargs

        async def setup_state(self, state: Any) -> Any:
            task = Task.model_validate_json(state["info"]["agenthub_task"])
            env = make(self.agenthub_env_id, **self.agenthub_env_kwargs)
            state[ENV_KEY], state[REWARDS_KEY], state[SCORE_KEY] = env, [], None
            first, _info = await env.reset(task)
            if said := _messages(first):
                state["prompt"] = [*state["prompt"], *said]
            return state

        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            env: Env[Any] = state[ENV_KEY]
            reply = messages[-1]["content"] if messages else ""
            step = await env.step(str(reply or ""))
            state[REWARDS_KEY].append(step.reward)
            if step.score is not None:
                state[SCORE_KEY] = step.score
            said = _messages(step.observation)
            if step.done:
                state["final_env_response"] = said
                await self.close_agenthub_env(state)
            return said

        async def close_agenthub_env(self, state: Any) -> None:
            env = state.get(ENV_KEY)
            state[ENV_KEY] = None
            if env is not None:
                await env.aclose()

        close_agenthub_env = vf.cleanup(close_agenthub_env)  # every rollout's end, errors too

    return AgentHubEnv
