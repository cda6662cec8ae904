"""What travels over OpenEnv's wire for an agenthub env: the action (the model's reply), the
observation (what the env adds to the conversation, and on reset the task's opening), the
state, and reset's parameters. These models are also the `/schema` the server publishes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, NonNegativeInt

from agenthub._types import Message, Step, Task

__all__ = [
    "ErrorCode",
    "ResetParams",
    "ServedAction",
    "ServedObservation",
    "ServedState",
    "wire_result",
]

ErrorCode = Literal[
    "INVALID_JSON",
    "UNKNOWN_TYPE",
    "VALIDATION_ERROR",
    "EXECUTION_ERROR",
    "CAPACITY_REACHED",
    "SESSION_ERROR",
]
"""OpenEnv's `WSErrorCode` values, the ones this server sends."""


class ServedAction(BaseModel):
    """One step's action: the model's whole reply, as `Env.step` takes it."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(description="the model's reply, given to the env's step() as is")
    metadata: dict[str, Any] = Field(default_factory=dict, description="ignored by the env")


class ResetParams(BaseModel):
    """`reset`'s parameters. The task is `task` when given (a whole agenthub Task, for a
    trainer that brings its own dataset), else the `task_index`-th of `split`, else the next
    of `split` in the server's round (every reset without one moves it on)."""

    model_config = ConfigDict(extra="forbid")

    seed: NonNegativeInt | None = Field(default=None, description="the env's reset seed")
    episode_id: str | None = Field(default=None, max_length=255, description="echoed in state")
    split: str = Field(default="train", description="the env's split to take the task from")
    task_index: NonNegativeInt | None = Field(default=None, description="the task's index")
    task: Task | None = Field(default=None, description="a task to play instead of the env's")


class ServedObservation(BaseModel):
    """An observation as OpenEnv's clients read it (reward and done travel beside it).

    `messages` is the env's answer when it answers in chat messages, `text` when it answers
    in text (text-completion envs). On reset, `prompt` is the task's opening (its messages,
    led by the env's system prompt) and `tools` and `stop` what the env offers the model;
    they are empty on later steps. `score` is the task score when it differs from the reward.
    """

    model_config = ConfigDict(extra="forbid")

    task_id: str
    prompt: list[Message] = []
    messages: list[Message] = []
    text: str = ""
    tools: list[dict[str, JsonValue]] = []
    stop: list[str] = []
    terminated: bool = False
    truncated: bool = False
    score: float | None = None
    info: dict[str, JsonValue] = {}
    extra_logs: dict[str, float] = {}
    metadata: dict[str, JsonValue] = {}


class ServedState(BaseModel):
    """A session's state: OpenEnv's `episode_id` and `step_count`, and the env it serves."""

    model_config = ConfigDict(extra="forbid")

    episode_id: str | None = None
    step_count: int = 0
    env_id: str
    task_id: str | None = None
    done: bool = False


def _said(observation: object) -> tuple[list[dict[str, Any]], str]:
    if isinstance(observation, str):
        return [], observation
    return [m.model_dump() for m in observation], ""  # type: ignore[attr-defined]


def wire_result(observation: dict[str, Any], reward: float | None, done: bool) -> dict[str, Any]:
    """OpenEnv's `serialize_observation` shape: the observation without reward and done,
    which travel beside it."""
    return {"observation": observation, "reward": reward, "done": done}


def _observation(task_id: str, said: object, **fields: Any) -> dict[str, Any]:
    """A `ServedObservation` as its JSON, built directly: this runs for every message."""
    messages, text = _said(said)
    return {
        "task_id": task_id,
        "prompt": [],
        "messages": messages,
        "text": text,
        "tools": [],
        "stop": [],
        "terminated": False,
        "truncated": False,
        "score": None,
        "info": {},
        "extra_logs": {},
        "metadata": {},
        **fields,
    }


def reset_observation(
    task: Task, first: object, env_system_prompt: str | None, tools: Sequence[Any], stop: Any
) -> dict[str, Any]:
    return _observation(
        task.id,
        first,
        prompt=[m.model_dump() for m in task.messages(env_system_prompt)],
        tools=[dict(tool) for tool in tools],
        stop=list(stop),
    )


def step_observation(task_id: str, step: Step[Any]) -> dict[str, Any]:
    info: Mapping[str, Any] = step.info if isinstance(step.info, Mapping) else {}
    return _observation(
        task_id,
        step.observation,
        terminated=step.terminated,
        truncated=step.truncated,
        score=step.score,
        info=dict(info),
        extra_logs=dict(step.extra_logs),
    )
