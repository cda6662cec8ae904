import json
import math

import pytest
from pydantic import ValidationError

from agenthub import EnvSpec, Message, Step, Task


def test_step_unpacks_like_gymnasium_and_keeps_flags_apart() -> None:
    step = Step([Message(role="user", content="hi")], 1, truncated=True)
    observation, reward, terminated, truncated, info = step
    assert reward == 1.0 and isinstance(reward, float)
    assert (terminated, truncated, step.done) == (False, True, True)
    assert info == {} and observation[0].content == "hi"


@pytest.mark.parametrize("bad", [math.nan, math.inf, "1", True, None])
def test_step_rejects_rewards_that_are_not_finite_numbers(bad: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        Step([], bad)  # type: ignore[arg-type]


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
