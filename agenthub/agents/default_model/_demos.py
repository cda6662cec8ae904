"""Demonstrations for the warm start, read from the environments' own task generators.

Every built-in procedural task carries `metadata["reference"]`: a correct response as text, and
may carry `metadata["mistake"]`: a plausible response with a known flaw that fails the task. A
demonstration is that task's prompt (chat messages) and its reference response, or, for a share
of the tasks that have one, its mistake: the warm-started model then makes that mistake about as
often, which leaves RL a flaw it can find and remove within minutes on a CPU.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from agenthub._errors import AgentHubError, EnvNotFoundError, NoTaskSourceError
from agenthub._registry import make
from agenthub._types import Message, Task

__all__ = ["Demonstration", "DemonstrationError", "collect_demonstrations", "digest"]


class DemonstrationError(AgentHubError):
    """The environments named for the warm start cannot provide demonstrations."""


@dataclass(frozen=True, slots=True)
class Demonstration:
    """A prompt and the reference response a model should learn to give to it."""

    env_id: str
    task_id: str
    messages: tuple[Message, ...]
    response: str


def collect_demonstrations(
    env_ids: Sequence[str],
    per_env: int,
    *,
    split: str = "train",
    mistake_share: float = 0.0,
    seed: int = 0,
) -> list[Demonstration]:
    """The first `per_env` tasks with a reference from each environment's `tasks(split)`,
    interleaved across environments so every training batch sees every family. Each task that
    carries a `metadata["mistake"]` shows it instead of the reference with probability
    `mistake_share` (drawn from `seed`: the same demonstrations every time)."""
    if not 0.0 <= mistake_share <= 1.0:
        raise ValueError(f"mistake_share must be within [0, 1], got {mistake_share}")
    per_family = [
        _from_env(env_id, per_env, split, random.Random(f"{seed}:{env_id}"), mistake_share)
        for env_id in env_ids
    ]
    mixed = itertools.chain.from_iterable(itertools.zip_longest(*per_family))
    return [demo for demo in mixed if demo is not None]


def _from_env(
    env_id: str, limit: int, split: str, rng: random.Random, mistake_share: float
) -> list[Demonstration]:
    try:
        env = make(env_id)
    except EnvNotFoundError as exc:
        raise DemonstrationError(
            f"the default model is warm-started on demonstrations from environment {env_id!r}, "
            f"which is not installed: {exc}"
        ) from exc
    demos: list[Demonstration] = []
    try:
        # Tasks without a reference are skipped, so an endless generator of them must not hang.
        for task in itertools.islice(env.tasks(split), limit * 10):
            if len(demos) == limit:
                break
            demo = _demonstration(env_id, task, rng.random() < mistake_share, env.system_prompt)
            if demo is not None:
                demos.append(demo)
    except NoTaskSourceError as exc:
        raise DemonstrationError(
            f"environment {env_id!r} has no built-in {split!r} tasks to draw demonstrations "
            "from; choose environments with procedural task generators"
        ) from exc
    if not demos:
        raise DemonstrationError(
            f"environment {env_id!r} yields no {split!r} tasks with metadata['reference'] "
            "(a correct response as text), so it gives no demonstrations"
        )
    return demos


def _demonstration(
    env_id: str, task: Task, show_mistake: bool, system_prompt: str | None = None
) -> Demonstration | None:
    """The task's prompt as an episode opens it (with the env's system prompt) and the answer
    to learn: its reference, or now and then the mistake it records."""
    reference = task.metadata.get("reference")
    if not isinstance(reference, str) or not reference:
        return None
    mistake = task.metadata.get("mistake")
    answer = mistake if show_mistake and isinstance(mistake, str) and mistake else reference
    return Demonstration(env_id, task.id, tuple(task.messages(system_prompt)), answer)


def digest(demos: Sequence[Demonstration]) -> str:
    """A content hash of the demonstrations, part of the default model's cache key."""
    h = hashlib.sha256()
    for demo in demos:
        record = [demo.env_id, [m.model_dump() for m in demo.messages], demo.response]
        h.update(json.dumps(record, sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()
