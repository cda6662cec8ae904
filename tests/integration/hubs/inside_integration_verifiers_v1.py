"""`agenthub.integrations.verifiers.load_environment` under verifiers 0.4 (only its v1 API),
inside the venv that test_integration_verifiers.py builds with verifiers 0.4.

verifiers' own loader resolves the environment from its taskset id and its own taskset
views select the tasks. The episode's `run` is driven with a scripted seat in place of
verifiers' `Agents`: a v1 agent plays through a harness program (the `null` harness syncs a
PEP 723 script with uv) against a model endpoint, which an offline test cannot start."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import verifiers.v1 as vf

import agenthub
from agenthub.integrations.verifiers import load_environment

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


@dataclass
class ScriptedTalk:
    """One interaction: `\\boxed{-1}` first, then `answer`; records what it was told."""

    answer: str
    task: Any
    told: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.trace = vf.Trace(
            task=vf.TraceTask(type="AgentHubTask", data=self.task.data),
            agent=vf.AgentInfo(config=vf.AgentConfig()),
        )

    async def turn(self, message: Any = None) -> vf.Segment:
        self.told.append(message)
        text = "\\boxed{-1}" if len(self.told) == 1 else f"\\boxed{{{self.answer}}}"
        return vf.Segment(messages=[vf.AssistantMessage(content=text)])


@dataclass
class ScriptedSeat:
    answer: str
    talks: list[ScriptedTalk] = field(default_factory=list)

    @contextlib.asynccontextmanager
    async def interaction(self, task: Any) -> AsyncIterator[ScriptedTalk]:
        self.talks.append(ScriptedTalk(self.answer, task))
        yield self.talks[-1]


@dataclass
class ScriptedAgents:
    agent: ScriptedSeat


def test_verifiers_loads_the_v1_environment_from_its_taskset_id() -> None:
    env = load_environment("math", num_examples=3, max_attempts=2)
    assert isinstance(env, vf.Env)
    assert vf.environment_class(env.config.taskset.id) is type(env)
    tasks = list(agenthub.make("math").tasks("held_out"))[:3]
    loaded = list(env.taskset.take(2))
    assert [t.data.prompt_text for t in loaded] == [str(t.prompt) for t in tasks[:2]]


async def test_an_episode_steps_the_env_on_each_reply_and_records_its_rewards() -> None:
    env = load_environment("math", num_examples=1, max_attempts=2)
    [task] = list(env.taskset)
    [agenthub_task] = list(agenthub.make("math").tasks("held_out"))[:1]
    seat = ScriptedSeat(str(agenthub_task.label))
    await env.run(task, ScriptedAgents(seat))  # type: ignore[arg-type]
    [talk] = seat.talks
    assert talk.told[0] is None  # the task's prompt opens the conversation
    [feedback] = talk.told[1]
    assert feedback["role"] == "user" and feedback["content"].startswith("Incorrect, try again.")
    assert len(talk.told) == 2
    assert talk.trace.rewards["agenthub_reward"].score == 1.0
    assert talk.trace.metrics["agenthub_score"] == 1.0


async def test_a_reply_that_never_solves_it_scores_the_env_s_zero() -> None:
    env = load_environment("math", num_examples=1)
    [task] = list(env.taskset)
    seat = ScriptedSeat("-1")
    await env.run(task, ScriptedAgents(seat))  # type: ignore[arg-type]
    [talk] = seat.talks
    assert len(talk.told) == 1
    assert talk.trace.rewards["agenthub_reward"].score == 0.0
    assert talk.trace.metrics["agenthub_score"] == 0.0
