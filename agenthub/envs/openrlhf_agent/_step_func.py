"""OpenRLHF's oldest agent form, run as an `AgentInstance`.

In OpenRLHF's first agent API, an agent file is a module-level `async def step(observation,
action, label, **kwargs)`: `observation` is the whole text so far (the prompt, then every reply
and every feedback), `action` the model's latest reply, `label` the task's label; it returns
`rewards`, `scores`, `next_observation` (the whole next text), `done`, `sampling_params` and
`extra_logs`. There is no reset: OpenRLHF imported the file afresh in a Ray actor of its own
for each episode, so module globals (a step counter, a game) are the episode's state. Each
episode here runs a fresh copy of the file for the same reason.
"""

from __future__ import annotations

import itertools
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from agenthub._errors import AgentFuncError
from agenthub._tracebacks import described

_copies = itertools.count()


class StepFunctionAgent:
    """One episode of a step-function file; `bind(path)` makes the class for one file."""

    path: ClassVar[Path]
    code: ClassVar[types.CodeType]

    @classmethod
    def bind(cls, path: Path) -> type:
        code = compile(path.read_bytes(), str(path), "exec")
        return type("AgentInstance", (cls,), {"path": path, "code": code})

    def __init__(self) -> None:
        self._step: Any = None

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self._step = self._fresh_copy().step
        return {"observation": states["observation"]}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        observation, action = states["observation_text"], states["action_text"]
        try:
            result = await self._step(
                observation, action, states["label"], sampling_params=states["sampling_params"]
            )
        except Exception as exc:
            raise AgentFuncError(
                f"{self.path}: step(observation, action, label) raised {described(exc)}"
            ) from exc
        if not (isinstance(result, Mapping) and {"rewards", "next_observation"} <= result.keys()):
            raise AgentFuncError(
                f"{self.path}: step(observation, action, label) must return a dict with "
                f"'rewards', 'next_observation' and 'done'; got {str(result)[:200]!r}"
            )
        text = result["next_observation"]
        if not isinstance(text, str):
            raise AgentFuncError(
                f"{self.path}: next_observation must be text, got {type(text).__name__}"
            )
        so_far = observation + action
        if not text.startswith(so_far):
            raise AgentFuncError(_rewritten(self.path, so_far, text))
        rest = {k: v for k, v in result.items() if k != "next_observation"}
        return {**rest, "environment_feedback": text[len(so_far) :]}

    def _fresh_copy(self) -> types.ModuleType:
        name = f"agenthub_agent_step_{next(_copies)}"
        module = types.ModuleType(name)
        module.__file__ = str(self.path)
        sys.modules[name] = module  # dataclasses and typing look the module up while it runs
        try:
            exec(self.code, module.__dict__)
        except Exception as exc:
            raise AgentFuncError(
                f"{self.path}: running the file for a new episode raised {described(exc)}"
            ) from exc
        finally:
            sys.modules.pop(name, None)
        return module


def _rewritten(path: Path, so_far: str, text: str) -> str:
    pairs = enumerate(zip(so_far, text, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(so_far), len(text)))
    return (
        f"{path}: step returned a next_observation that does not start with the observation "
        f"and action it was given (at character {at}, {so_far[at : at + 40]!r} became "
        f"{text[at : at + 40]!r}). agenthub appends only the new text after them, so that the "
        "model's tokens stay exactly as sampled: return observation + action + the "
        "environment's reply, as OpenRLHF's examples do, or write an agenthub Env to rewrite "
        "earlier text"
    )
