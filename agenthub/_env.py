"""The environment contract every agenthub environment implements."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic

import numpy as np

from agenthub._errors import NoTaskSourceError
from agenthub._types import ObsT, Step, Task

if TYPE_CHECKING:
    from agenthub._spec import EnvSpec

__all__ = ["Env"]


class Env(abc.ABC, Generic[ObsT]):
    """An asynchronous, Gymnasium-style environment for language models.

    One instance runs one episode at a time: `reset` starts an episode on a `Task`, each `step`
    takes the model's whole reply as text and returns a `Step`. Many episodes run concurrently
    as many instances, so an instance may keep per-episode state on `self` freely but must not
    share mutable state with other instances except through objects built for concurrency.

    Contract (checked by `agenthub.testing.check_env`):

    - `reset` and `step` are coroutines and must never block the event loop: run CPU-heavy or
      blocking work with `anyio.to_thread.run_sync` or in a process.
    - Any string is a valid action. Malformed model output is answered with an observation and a
      reward, not an exception. Raise only when the environment itself is broken; the episode
      runner records the exception on the trajectory as a typed error.
    - With the same task and seed, `reset` followed by the same actions yields the same
      observations, rewards and flags.
    - Both methods are cancellation-safe: if cancelled part-way, the instance can still be
      `reset` and `aclose`d, and nothing it started (processes, containers) is left running.
    - `aclose` releases everything and may be called more than once.
    - Tasks, observations, `info`, `tools`, `stop` and `system_prompt` are JSON-serialisable.

    Construct environments through `agenthub.make`, which sets `spec` so a Ray worker can
    rebuild the same environment from JSON.
    """

    spec: EnvSpec | None = None
    tools: Sequence[Mapping[str, Any]] = ()
    """The functions the model may call, as JSON schemas in the OpenAI function-calling format
    (`{"type": "function", "function": {"name": ..., "description": ..., "parameters": ...}}`).
    They are given to the model's chat template (its `tools`) when the episode opens, so set
    them on the class, or in `reset` to offer different tools per task. The env reads the calls
    from the reply text itself; `agenthub.tools.ToolEnv` does all of it for Python functions."""
    stop: Sequence[str] = ()
    """Strings that end the model's reply as soon as it writes one, so the env can act on it:
    `("</search>",)` for an env that runs the query its reply closes, ReAct's
    `("Observation:",)`. The reply keeps every token as sampled: it ends with the token that
    completed the string, string included. Read when the episode opens, like `tools`, and
    added to the run's own stop strings (`agenthub eval --stop`, `rollout.stop`)."""
    system_prompt: str | None = None
    """The system message an episode opens with when its task's prompt has none (a text
    prompt, or chat messages not led by a system message): the env's rules and answer format,
    for tasks from anywhere (`--tasks FILE`, `eval.tasks`), not only its own. A task's own
    system message is kept instead. Read when the episode opens, like `tools`; it needs the
    chat template."""
    _np_random: np.random.Generator | None = None
    _np_seed: int | None = None

    @abc.abstractmethod
    async def reset(self, task: Task, *, seed: int | None = None) -> tuple[ObsT, dict[str, Any]]:
        """Start a new episode on `task` and return the first observation and an info dict.

        The observation is what the environment adds after the task's prompt, often an empty
        list. When `seed` is given, call `self.reseed(seed)` and draw randomness only from
        `self.np_random`, so that episodes replay exactly.
        """

    @abc.abstractmethod
    async def step(self, action: str) -> Step[ObsT]:
        """Apply the model's reply and return the environment's answer.

        An answer of chat messages opens a new turn through the chat template (a user message
        for feedback, `tool` messages for tool results); an answer of text is appended as is,
        with no role or turn markers, for text-only envs or for what the model's own turn
        goes on from. Set `terminated` when the episode ends by its own logic and `truncated`
        when a budget ends it. Calling `step` after the episode ended, or before `reset`, is a
        usage error. While a run steps the env, `agenthub.transcript()` gives the episode as
        the model saw it: every token so far, the templated prompt and why the reply ended.
        """

    async def aclose(self) -> None:
        """Release resources (connections, sandboxes, processes). Idempotent."""
        return None

    def tasks(self, split: str = "train") -> Iterable[Task]:
        """The environment's own tasks for `split` (conventionally `train` or `held_out`).

        Environments without a task source of their own leave this as is; tasks then come
        from a dataset file given on the command line.
        """
        raise NoTaskSourceError(
            f"{type(self).__name__} has no built-in tasks for split {split!r}; "
            "pass a task file (JSONL) instead."
        )

    @property
    def np_random(self) -> np.random.Generator:
        """The episode's random generator, seeded by `reseed` (from entropy until then).

        Built on first use after each `reseed`, from the seed given: the same draws as a
        generator built in `reseed` itself, without its cost (a tenth of a served episode's
        CPU) for the many envs that reseed on every reset and never draw."""
        if self._np_random is None:
            self._np_random = np.random.default_rng(self._np_seed)
        return self._np_random

    def reseed(self, seed: int | None) -> None:
        """Reseed `np_random`; `None` draws fresh entropy."""
        self._np_seed = seed
        self._np_random = None

    @property
    def unwrapped(self) -> Env[Any]:
        """The innermost environment beneath any wrappers."""
        return self

    def __str__(self) -> str:
        return (
            f"<{type(self).__name__}<{self.spec.id}>>" if self.spec else f"<{type(self).__name__}>"
        )
