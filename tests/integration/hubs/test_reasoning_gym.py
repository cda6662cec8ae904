"""The reasoning_gym adapter on the real reasoning-gym package."""

from __future__ import annotations

import pytest

import agenthub
from agenthub.envs.reasoning_gym import ReasoningGymEnv
from agenthub.testing import check_env

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def play(env: agenthub.Env[object], task: agenthub.Task, reply: str) -> agenthub.Step[object]:
    await env.reset(task, seed=0)
    return await env.step(reply)


async def test_basic_arithmetic_scores_a_right_and_a_wrong_answer() -> None:
    env = agenthub.make("reasoning_gym", dataset="basic_arithmetic", size=4, seed=7)
    task = next(iter(env.tasks("train")))
    assert isinstance(task.prompt, str) and task.prompt.startswith("Calculate")
    right = await play(env, task, f"Let me think. <answer>{task.label}</answer>")
    wrong = await play(env, task, f"<answer>{int(str(task.label)) + 1}</answer>")
    assert (right.reward, right.score, right.terminated) == (1.0, 1.0, True)
    assert (wrong.reward, wrong.score, wrong.terminated) == (0.0, 0.0, True)
    assert right.extra_logs == {"score_answer": 1.0}
    assert "<answer>" in (env.system_prompt or "")


async def test_a_dataset_s_own_config_and_partial_credit_reach_the_reward() -> None:
    env = agenthub.make(
        "reasoning_gym", dataset="basic_arithmetic", size=2, min_terms=2, max_terms=2
    )
    task = next(iter(env.tasks("train")))
    # Two terms: "Calculate A op B." has exactly two numbers (some maybe negative).
    assert len(task.prompt.rstrip(".").split()) == 4
    # reasoning-gym's default scorer gives len(answer)/len(reply) when the answer is inside.
    step = await play(env, task, f"<answer>{task.label} is it</answer>")
    assert 0.0 < step.reward < 1.0 and step.score == 0.0


def test_splits_differ_by_seed_and_replay() -> None:
    env = ReasoningGymEnv(dataset="basic_arithmetic", size=5, seed=3)
    train = [t.prompt for t in env.tasks("train")]
    again = ReasoningGymEnv(dataset="basic_arithmetic", size=5, seed=3)
    assert train == [t.prompt for t in again.tasks("train")]
    assert train != [t.prompt for t in env.tasks("held_out")]
    assert len(train) == 5


async def test_composite_mixes_datasets_and_scores_each_by_its_own() -> None:
    env = agenthub.make(
        "reasoning_gym",
        dataset="composite",
        size=12,
        datasets={"basic_arithmetic": 1, "leg_counting": 1},
    )
    tasks = list(env.tasks("train"))
    assert {t.metadata["source_dataset"] for t in tasks} == {"basic_arithmetic", "leg_counting"}
    for task in tasks[:4]:
        step = await play(env, task, f"<answer>{task.label}</answer>")
        assert step.score == 1.0, task


def test_a_wrong_dataset_name_fails_when_made_naming_the_known_ones() -> None:
    with pytest.raises(agenthub.EnvArgumentsError, match="no dataset 'basic_arith'.*leg_counting"):
        agenthub.make("reasoning_gym", dataset="basic_arith")


async def test_a_task_of_another_seed_is_an_error_naming_the_arguments() -> None:
    task = next(iter(ReasoningGymEnv(dataset="basic_arithmetic", size=2, seed=1).tasks()))
    env = ReasoningGymEnv(dataset="basic_arithmetic", size=2, seed=2)
    with pytest.raises(agenthub.AgentHubError, match="not row 0 of this env's basic_arithmetic"):
        await env.reset(task)


def test_check_env_passes() -> None:
    check_env(lambda: agenthub.make("reasoning_gym", dataset="basic_arithmetic", size=3))
    check_env(
        lambda: agenthub.make(
            "reasoning_gym", dataset="composite", size=3, datasets={"leg_counting": 1}
        )
    )
