import json
import math

import numpy as np
import pytest
from pydantic import ValidationError

from agenthub import EnvSpec, Message, Step, Task
from agenthub._returns import step_problems


def test_step_unpacks_like_gymnasium_and_keeps_flags_apart() -> None:
    step = Step([Message(role="user", content="hi")], 1, truncated=True)
    observation, reward, terminated, truncated, info = step
    assert reward == 1.0 and isinstance(reward, float)
    assert (terminated, truncated, step.done) == (False, True, True)
    assert info == {} and observation[0].content == "hi"


@pytest.mark.parametrize(
    "bad", [math.nan, math.inf, "1", True, None, np.float32("nan"), np.bool_(True), np.array(1.0)]
)
def test_step_rejects_rewards_that_are_not_finite_numbers(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        Step([], bad)  # type: ignore[arg-type]


def test_step_takes_numpy_numbers_and_bools_and_keeps_python_ones() -> None:
    rewards = np.array([0.25, 0.75], dtype=np.float32)
    guess, secret = np.int64(3), np.int64(3)
    step = Step(
        "",
        rewards.mean(),
        terminated=guess == secret,
        truncated=np.array(False),  # type: ignore[arg-type]
        score=np.int64(1),
        extra_logs={"turns": np.int64(2), "ratio": np.float16(0.5)},
    )
    values = [step.reward, step.terminated, step.truncated, step.score, *step.extra_logs.values()]
    assert [type(v) for v in values] == [float, bool, bool, float, float, float]
    assert values == [0.5, True, False, 1.0, 2.0, 0.5]
    assert step_problems(step) == []
    assert json.loads(json.dumps([step.reward, step.terminated, step.extra_logs])) == [
        0.5,
        True,
        {"turns": 2.0, "ratio": 0.5},
    ]


def test_task_round_trips_through_json_with_chat_prompt() -> None:
    task = Task(
        id="a",
        prompt=(Message(role="system", content="s"), Message(role="user", content="u")),
        label={"tests": ["assert f() == 1"]},
        metadata={"difficulty": 3},
    )
    assert Task.model_validate_json(task.model_dump_json()) == task
    assert [m.role for m in task.messages()] == ["system", "user"]
    assert Task(id="b", prompt="hello").messages() == [Message(role="user", content="hello")]


def test_task_and_message_reject_unknown_fields_and_roles() -> None:
    with pytest.raises(ValidationError):
        Task(id="a", prompt="p", lable="typo")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        Message(role="robot", content="x")  # type: ignore[arg-type]


def test_env_spec_is_frozen_json_and_checks_entry_point() -> None:
    spec = EnvSpec(id="x", entry_point="pkg.mod:Cls", kwargs={"n": 3, "names": ["a"]})
    assert EnvSpec.model_validate_json(spec.model_dump_json()) == spec
    assert json.loads(spec.model_dump_json())["kwargs"] == {"n": 3, "names": ["a"]}
    assert spec.with_kwargs(n=4).kwargs == {"n": 4, "names": ["a"]}
    with pytest.raises(ValidationError):
        spec.id = "y"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="package.module:Attr"):
        EnvSpec(id="x", entry_point="pkg.mod.Cls")


@pytest.mark.parametrize("passed", [True, np.bool_(False)])
def test_a_pass_fail_reward_is_refused_with_the_way_to_write_it(passed: object) -> None:
    # `Step(obs, guess == secret)` reads as a reward of 1 or 0, but a bool there is as often
    # `terminated` in the wrong place: refused, with how to mean it.
    with pytest.raises(TypeError, match=r"got .*bool.*; a pass/fail reward is a number: wrap it"):
        Step([], passed)  # type: ignore[arg-type]
