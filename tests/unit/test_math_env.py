"""The `math` env: procedural tasks, JSONL loaders, retries with feedback, reward shaping."""

from __future__ import annotations

from pathlib import Path

import pytest

from agenthub import Message, NoTaskSourceError, make
from agenthub.envs.math import generate_tasks, read_math_jsonl
from agenthub.testing import check_env

pytestmark = pytest.mark.timeout(120)


def test_math_env_keeps_the_contract() -> None:
    check_env(lambda: make("math"))
    check_env(lambda: make("math", max_attempts=3))


def test_generator_is_seeded_and_splits_are_disjoint() -> None:
    train = list(generate_tasks("train", num_tasks=300, seed=1))
    assert train == list(generate_tasks("train", num_tasks=300, seed=1))
    assert train != list(generate_tasks("train", num_tasks=300, seed=2))
    held_out = list(generate_tasks("held_out", num_tasks=300, seed=1))
    assert {t.prompt for t in train}.isdisjoint({t.prompt for t in held_out})
    assert {t.metadata["kind"] for t in train} == {"arithmetic", "fractions", "linear_equation"}
    assert len({t.id for t in train}) == 300
    with pytest.raises(ValueError, match="splits"):
        list(generate_tasks("test"))


def test_every_reference_solution_verifies_and_every_planted_mistake_does_not() -> None:
    from agenthub.envs.math import default_pool

    tasks = [*generate_tasks("train", num_tasks=60), *generate_tasks("held_out", num_tasks=60)]
    futures = [
        default_pool().submit(str(t.metadata["reference"]), str(t.label), timeout_s=30)
        for t in tasks
    ]
    assert [f.result() for f in futures] == [True] * len(tasks)
    assert all(str(t.metadata["reference"]).endswith(f"\\boxed{{{t.label}}}") for t in tasks)
    # The planted mistake hedges with a second, wrong answer: never rewarded.
    futures = [
        default_pool().submit(str(t.metadata["mistake"]), str(t.label), timeout_s=30) for t in tasks
    ]
    assert [f.result() for f in futures] == [False] * len(tasks)


@pytest.mark.anyio
async def test_single_turn_rewards_the_verified_answer() -> None:
    env = make("math")
    task = next(iter(env.tasks("train")))
    assert await env.reset(task, seed=0) == ([], {})
    step = await env.step(str(task.metadata["reference"]))
    assert (step.reward, step.score, step.terminated) == (1.0, 1.0, True)
    assert dict(step.extra_logs) == {"attempts": 1.0, "correct": 1.0}
    await env.reset(task)
    step = await env.step("\\boxed{banana}")
    assert (step.reward, step.score, step.terminated, step.observation) == (0.0, 0.0, True, [])
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("again")
    await env.aclose()


@pytest.mark.anyio
async def test_retries_give_feedback_and_shape_the_final_reward() -> None:
    env = make("math", max_attempts=3, attempt_discount=0.5, wrong_reward=-1.0)
    task = next(iter(env.tasks("held_out")))
    await env.reset(task)
    first = await env.step("\\boxed{banana}")
    assert not first.done and first.reward == 0.0
    assert isinstance(first.observation[0], Message) and "try again" in first.observation[0].content
    second = await env.step(f"\\boxed{{{task.label}}}")
    assert (second.reward, second.score, second.terminated) == (0.5, 1.0, True)
    assert second.extra_logs["attempts"] == 2.0
    await env.reset(task)
    steps = [await env.step("no idea") for _ in range(3)]
    assert [s.done for s in steps] == [False, False, True]
    assert (steps[-1].reward, steps[-1].score) == (-1.0, 0.0)


def test_gsm8k_and_math_files_load_with_their_gold_answers(fixtures: Path) -> None:
    gsm8k = list(read_math_jsonl(fixtures / "gsm8k.jsonl"))
    assert [t.label for t in gsm8k] == ["72", "2500"]
    assert gsm8k[0].id == "gsm8k-1" and "\\boxed{}" in str(gsm8k[0].prompt)
    assert "#### 72" in str(gsm8k[0].metadata["solution"])
    problems = list(read_math_jsonl(fixtures / "math.jsonl"))
    assert [t.label for t in problems] == [r"\frac{1}{2}", "(-1, 1)"]
    assert problems[0].metadata["level"] == "Level 1" and problems[1].id == "interval-1"
    env = make("math", dataset=str(fixtures / "gsm8k.jsonl"))
    assert len(list(env.tasks("train"))) == 2
    with pytest.raises(
        NoTaskSourceError, match="eval_dataset=FILE too .*, or evaluate its .train. split"
    ) as caught:
        env.tasks("held_out")
    assert "its generated tasks are off for every split" in str(caught.value)  # why


def test_jsonl_files_check_env(fixtures: Path) -> None:
    check_env(lambda: make("math", dataset=str(fixtures / "math.jsonl")))


def test_bad_lines_say_where_and_what_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "2+2?", "answer": "four"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: GSM8K answer has no '#### N' line"):
        list(read_math_jsonl(path))
    path.write_text('{"text": "2+2?"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*'question' and 'answer'.*\['text'\]"):
        list(read_math_jsonl(path))
