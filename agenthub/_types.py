"""The messages that travel between an environment and the rest of agenthub."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
)

__all__ = ["Message", "Observation", "Step", "Task"]


class Message(BaseModel):
    """One chat message: what a model said, or what an environment says back.

    `name` and `tool_call_id` are for `tool` messages, for chat templates that show which tool
    answered or which call it answers; they are left out of the message when unset.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    name: str | None = None
    tool_call_id: str | None = None

    @model_serializer(mode="wrap")
    def _without_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Templates test `message.name is defined`: an unset field is absent, not None.
        data: dict[str, Any] = handler(self)
        return {k: v for k, v in data.items() if v is not None}


Observation = list[Message] | str
"""What an environment adds to the conversation: chat messages, or raw text for
text-completion environments. An environment never sees token ids."""

ObsT = TypeVar("ObsT")


class Task(BaseModel):
    """One problem to pose to the model.

    `prompt` is the opening of the conversation: plain text or chat messages. `label` is whatever
    the environment needs to score an answer (a reference answer, unit tests, ...); it must be
    JSON so tasks can be stored, shipped to Ray workers and replayed. `metadata` is JSON too,
    for the env (and people) to read; a trajectory names its task by `id`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    prompt: str | tuple[Message, ...]
    label: JsonValue = None
    metadata: dict[str, JsonValue] = {}

    def messages(self, system_prompt: str | None = None) -> list[Message]:
        """The prompt as chat messages (a text prompt becomes one user message), led by
        `system_prompt` (an env's `Env.system_prompt`) unless it opens with a system message
        of its own."""
        if isinstance(self.prompt, str):
            messages = [Message(role="user", content=self.prompt)]
        else:
            messages = list(self.prompt)
        if system_prompt is not None and not (messages and messages[0].role == "system"):
            messages.insert(0, Message(role="system", content=system_prompt))
        return messages


@dataclass(frozen=True, slots=True)
class Step(Generic[ObsT]):
    """What `Env.step` returns. Unpacks like Gymnasium's 5-tuple.

    - `observation`: the environment's reply to append to the conversation (may be empty).
    - `reward`: this step's reward; the episode return is the sum over steps. Any finite real
      number but a bool (a numpy one too: `scores.mean()`), kept as a Python float.
    - `terminated`: the episode reached a natural end (answer given, game won or lost). A
      numpy bool (`guess == secret` on numpy ints) is kept as a Python bool, as for `truncated`.
    - `truncated`: the episode was cut short from outside its own logic (turn or token budget).
    - `info`: free-form JSON diagnostics for people; nothing the trainer needs travels here.
    - `score`: the task score used for filtering and pass@k, when it differs from `reward`
      (OpenRLHF's `scores`). `None` means "same as the reward".
    - `extra_logs`: numbers to log per trajectory (OpenRLHF's `extra_logs`). Here and in
      `score` too, a numpy number is kept as a Python float.
    """

    observation: ObsT
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)
    score: float | None = None
    extra_logs: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A step is stored as JSON and summed: numpy's numbers and bools become Python's here.
        if not _real(self.reward):
            hint = "; a pass/fail reward is a number: wrap it in float(...)"
            hint = hint if isinstance(self.reward, bool) or _numpy_bool(self.reward) else ""
            raise TypeError(f"Step.reward must be a float, got {type(self.reward).__name__}{hint}")
        reward = float(self.reward)
        if not math.isfinite(reward):
            raise ValueError(f"Step.reward must be finite, got {reward}")
        object.__setattr__(self, "reward", reward)
        for flag in ("terminated", "truncated"):
            if _numpy_bool(value := getattr(self, flag)):
                object.__setattr__(self, flag, bool(value))
        if self.score is not None and _real(self.score):
            object.__setattr__(self, "score", float(self.score))
        if isinstance(self.extra_logs, Mapping):
            logs = {k: float(v) if _real(v) else v for k, v in self.extra_logs.items()}
            object.__setattr__(self, "extra_logs", logs)

    @property
    def done(self) -> bool:
        """True when the episode is over, for either reason."""
        return self.terminated or self.truncated

    def __iter__(self) -> Iterator[Any]:
        return iter((self.observation, self.reward, self.terminated, self.truncated, self.info))


def _real(value: object) -> bool:
    """A real number that is no bool: Python's, or numpy's without importing numpy."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _numpy_bool(value: object) -> bool:
    """numpy's bool, or a 0-d boolean array, without importing numpy. Anything else but a
    Python bool is left for `check_env` and the runner to name."""
    return getattr(getattr(value, "dtype", None), "kind", None) == "b" and (
        getattr(value, "shape", None) == ()
    )
