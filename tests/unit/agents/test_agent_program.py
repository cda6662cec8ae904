"""The agent_program env: a program's own loop, played by the runner through the endpoint."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

import agenthub
from agenthub import Task
from agenthub.agents import (
    ChatTokenizer,
    EpisodeRunner,
    FakeEngine,
    RolloutConfig,
    SamplingParams,
    Trajectory,
)
from tests.unit.agents.test_openai_endpoint import react_engine, token_differences

pytestmark = pytest.mark.anyio

ENV = "agenthub.envs.agent_program:AgentProgramEnv"
PROGRAMS = "tests.unit.agents._programs"


def runner(
    engine: FakeEngine, chat: ChatTokenizer, program: str, **kwargs: object
) -> EpisodeRunner:
    env_kwargs = {"program": f"{PROGRAMS}:{program}", "reward": f"{PROGRAMS}:task_reward"}
    env_kwargs.update(kwargs)
    config = RolloutConfig(sampling=SamplingParams(max_tokens=64), concurrency=64)
    return EpisodeRunner(engine, chat, ENV, config, env_kwargs=env_kwargs)


def echo_engine(chat: ChatTokenizer) -> FakeEngine:
    """Answers with the task id the conversation names, so mixed-up episodes show."""

    def reply(prompt: Sequence[int]) -> list[int]:
        [task_id] = set(re.findall(r"Task (t\d+)", chat.decode_all(prompt)))
        return [*chat.encode_text(f"ok {task_id}"), chat.closing_ids[0]]

    return FakeEngine(reply, stop_token_ids=chat.stop_token_ids, latency_s=0.005)


async def test_a_react_program_gives_one_exact_trajectory(tool_chat: ChatTokenizer) -> None:
    engine = react_engine(tool_chat)
    task = Task(id="sum", prompt="What is 2 + 3?", label=5)
    [t] = await runner(engine, tool_chat, "react").collect([task])
    assert t.error is None, t.error
    assert (t.reward, t.num_turns, t.terminated, t.segments) == (1.0, 2, True, [])
    assert token_differences(t, engine) == 0
    # The model's tokens are exactly the two generations, in order.
    sampled = [tok for tok, m in zip(t.tokens, t.loss_mask, strict=True) if m]
    assert sampled == [tok for g in engine.generations for tok in g.token_ids]
    assert t.finish_reasons == ["stop", "stop"]


async def test_a_rewritten_history_is_a_segment_of_its_own(chat: ChatTokenizer) -> None:
    engine = echo_engine(chat)
    [t] = await runner(engine, chat, "summarising").collect([Task(id="t1", prompt="-", label="t1")])
    assert t.error is None, t.error
    assert len(t.segments) == 1 and t.num_turns == 3
    assert token_differences(t, engine) == 0
    first, second = t.segment_trajectories()
    assert (first.reward, second.reward) == (t.reward, t.reward) == (1.0, 1.0)
    # The first segment holds two replies, the second one, each opened by its own prompt.
    assert engine.requests[2] == tuple(second.tokens[: second.loss_mask.index(1)])
    assert first.tokens[: first.loss_mask.index(1)] == list(engine.requests[0])
    assert sum(second.loss_mask) == len(engine.generations[2].token_ids)
    assert t.extra_logs["segments"] == 2.0


async def test_text_completion_programs_extend_their_prompt(chat: ChatTokenizer) -> None:
    engine = echo_engine(chat)
    engine._reply = lambda prompt: chat.encode_text(" go")
    [t] = await runner(engine, chat, "texting", reward=f"{PROGRAMS}:length_reward").collect(
        [Task(id="t2", prompt="-")]
    )
    assert t.error is None and t.segments == [] and t.num_turns == 3
    assert token_differences(t, engine) == 0


async def test_64_concurrent_programs_keep_their_episodes_apart(chat: ChatTokenizer) -> None:
    engine = echo_engine(chat)
    tasks = [Task(id=f"t{i}", prompt="-", label=f"t{i}") for i in range(64)]
    trajectories = await runner(engine, chat, "summarising").collect(tasks)
    assert sorted(t.task_id for t in trajectories) == sorted(t.id for t in tasks)
    for t in trajectories:
        assert t.error is None and t.reward == 1.0
        assert set(re.findall(r"t\d+", chat.decode_all(t.tokens))) == {t.task_id}
        assert token_differences(t, engine) == 0
    assert len(engine.generations) == 3 * 64


@pytest.mark.parametrize(
    ("program", "budget_s", "says"),
    [
        ("raising", 5.0, "raised KeyError: 'no such tool'"),
        ("hanging", 0.2, "ran past its budget of 0.2 s"),
        ("silent", 5.0, "returned without calling the model"),
        ("not_async", 5.0, "must be `async def agent(client, task)`"),
    ],
)
async def test_a_failing_program_is_an_env_error_with_its_cause(
    chat: ChatTokenizer, program: str, budget_s: float, says: str
) -> None:
    engine = echo_engine(chat)
    task = Task(id="t3", prompt="-", label="t3")
    if program == "not_async":  # refused when the env is built, before any episode
        with pytest.raises(ValueError, match=re.escape(says)):
            agenthub.make(ENV, program=f"{PROGRAMS}:{program}", reward=f"{PROGRAMS}:task_reward")
        return
    [t] = await runner(engine, chat, program, budget_s=budget_s).collect([task])
    assert t.error is not None and t.error.cause == "env_error"
    assert says in t.error.message
    assert (t.terminated, t.truncated, t.reward) == (False, False, 0.0)


async def test_a_verifier_env_scores_the_result(chat: ChatTokenizer) -> None:
    engine = echo_engine(chat)
    verifier = {"verifier": "tests.unit.agents._programs:ContainsLabel", "reward": None}
    tasks = [Task(id="t4", prompt="-", label="t4"), Task(id="t5", prompt="-", label="nope")]
    trajectories = await runner(engine, chat, "summarising", **verifier).collect(tasks)
    assert sorted((t.task_id, t.reward) for t in trajectories) == [("t4", 1.0), ("t5", 0.0)]


async def test_an_engine_failure_is_the_episode_s_cause_even_if_the_program_caught_it(
    chat: ChatTokenizer,
) -> None:
    def broken(prompt: Sequence[int]) -> list[int]:
        raise_engine()
        return []

    engine = FakeEngine(broken)
    [t] = await runner(engine, chat, "raising").collect([Task(id="t6", prompt="-", label=1)])
    assert t.error is not None and t.error.cause == "generation_error"
    assert "the fake engine is down" in t.error.message


def raise_engine() -> None:
    from agenthub.agents import EngineError

    raise EngineError("the fake engine is down")


def test_segments_must_lie_inside_the_tokens() -> None:
    base = dict(
        env="e",
        task_id="t",
        tokens=[1, 2, 3],
        loss_mask=[0, 1, 1],
        logprobs=[0.0, -1.0, -1.0],
        policy_versions=[0, 0, 0],
        step_rewards=[1.0],
        reward=1.0,
        terminated=True,
        truncated=False,
        num_turns=1,
        timings={},
    )
    with pytest.raises(ValueError, match="segments"):
        Trajectory(**base, segments=[3])  # type: ignore[arg-type]
    halves = Trajectory(**base, segments=[2]).segment_trajectories()  # type: ignore[arg-type]
    assert [h.tokens for h in halves] == [[1, 2], [3]]


def command_runner(
    engine: FakeEngine, chat: ChatTokenizer, command: str, **kwargs: object
) -> EpisodeRunner:
    env_kwargs = {"command": command, "reward": f"{PROGRAMS}:task_reward", **kwargs}
    config = RolloutConfig(sampling=SamplingParams(max_tokens=64), concurrency=8)
    return EpisodeRunner(engine, chat, ENV, config, env_kwargs=env_kwargs)


def command(script: str) -> str:
    return shlex.join([sys.executable, "-c", script])


async def test_a_command_runs_against_the_endpoint_over_loopback_http(
    chat: ChatTokenizer,
) -> None:
    engine = echo_engine(chat)
    agent = shlex.join([sys.executable, str(Path(__file__).with_name("_command_agent.py"))])
    tasks = [Task(id="t7", prompt="-", label="t7"), Task(id="t8", prompt="-", label="nope")]
    trajectories = await command_runner(engine, chat, agent).collect(tasks)
    assert sorted((t.task_id, t.reward) for t in trajectories) == [("t7", 1.0), ("t8", 0.0)]
    for t in trajectories:
        assert t.error is None and t.num_turns == 1
        assert token_differences(t, engine) == 0
        assert chat.decode_all(t.tokens).count(f"ok {t.task_id}") == 1


@pytest.mark.parametrize(
    ("script", "budget_s", "says"),
    [
        (
            "import sys; sys.stderr.write('no API key found'); sys.exit(3)",
            30.0,
            "exited with status 3",
        ),
        ("import time; time.sleep(60)", 0.5, "ran past its budget of 0.5 s"),
        ("print('done')", 30.0, "returned without calling the model"),
    ],
)
async def test_a_failing_command_is_an_env_error_with_its_cause(
    chat: ChatTokenizer, script: str, budget_s: float, says: str
) -> None:
    engine = echo_engine(chat)
    run = command_runner(engine, chat, command(script), budget_s=budget_s)
    [t] = await run.collect([Task(id="t9", prompt="-", label=1)])
    assert t.error is not None and t.error.cause == "env_error"
    assert says in t.error.message
    if "status 3" in says:
        assert "no API key found" in t.error.message


def test_program_and_command_are_exclusive() -> None:
    with pytest.raises(ValueError, match="give one"):
        agenthub.make(
            ENV, program=f"{PROGRAMS}:react", command="x", reward=f"{PROGRAMS}:task_reward"
        )
