"""An agenthub env as OpenRLHF's `AgentInstance`: OpenRLHF's `MultiTurnAgentExecutor`
samples each reply and hands it to `step`; the env answers with its feedback, reward and
whether the episode is over."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import JsonValue

from agenthub._env import Env
from agenthub._registry import make
from agenthub._types import Message, Task

__all__ = ["EnvAgent", "Reward", "feedback_text"]


class Reward(float):
    """A reward as OpenRLHF's executor reads it (`step_result["rewards"].item()`), without
    importing torch: a float with `item()`."""

    def item(self) -> float:
        return float(self)


def feedback_text(observation: object) -> str:
    """The env's answer as text to append after the model's reply: text as is; chat
    messages as `role: content` lines followed by `assistant: `, the plain rendering
    agenthub gives chat prompts to text-only agents (a chat template's own turn markers
    need the model's tokenizer, which OpenRLHF does not hand an agent)."""
    if isinstance(observation, str):
        return observation
    messages: list[Message] = list(observation)  # type: ignore[call-overload]
    if not messages:
        return ""
    return "\n" + "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant: "


def _label(label: object) -> JsonValue:
    """OpenRLHF's label as the env's task label: a JSON object or list written as text (a
    `code_exec` test spec in a dataset column) is read back; anything else is kept."""
    if isinstance(label, str) and label.lstrip()[:1] in ("{", "["):
        try:
            parsed: JsonValue = json.loads(label)
        except json.JSONDecodeError:
            return label
        return parsed
    return label  # type: ignore[return-value]


class EnvAgent:
    """OpenRLHF's `AgentInstance` protocol over one agenthub env (`env_id`, `env_kwargs` as
    `agenthub.make` takes them): `reset(states)` poses the sample's prompt and label as a
    `Task` and returns the prompt with the env's opening; `step(states)` gives the env the
    reply and returns `rewards`, `scores`, `environment_feedback`, `done` and `extra_logs`.
    The env is built on the first reset and closed when the episode ends."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        self._env_id = env_id
        self._env_kwargs = dict(env_kwargs or {})
        self._env: Env[Any] | None = None

    async def reset(self, states: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        prompt = str(states["observation"])
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
        task = Task(id=f"openrlhf/{digest}", prompt=prompt, label=_label(states.get("label")))
        await self.aclose()
        self._env = make(self._env_id, **self._env_kwargs)
        first, _info = await self._env.reset(task)
        return {"observation": prompt + feedback_text(first)}

    async def step(self, states: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        env = self._env
        if env is None:
            raise RuntimeError(
                f"agenthub env {self._env_id}: step before reset, or after the episode ended"
            )
        step = await env.step(str(states["action_text"]))
        if step.done:
            await self.aclose()
        score = step.reward if step.score is None else step.score
        return {
            "rewards": Reward(step.reward),
            "scores": Reward(score),
            "environment_feedback": "" if step.done else feedback_text(step.observation),
            "done": step.done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {k: float(v) for k, v in step.extra_logs.items()},
        }

    async def aclose(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            await env.aclose()
