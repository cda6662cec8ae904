import json
from pathlib import Path

import pytest

from agenthub import Task
from agenthub.wrappers import Recorder, TurnLimit

from ._envs import CountdownEnv

pytestmark = pytest.mark.anyio

TASK = Task(id="t", prompt="go", label=3)


async def test_turn_limit_truncates_without_terminating() -> None:
    env = TurnLimit(CountdownEnv(), max_turns=2)
    await env.reset(TASK, seed=1)
    first = await env.step("a")
    second = await env.step("b")
    assert not first.done
    assert (second.terminated, second.truncated) == (False, True)
    assert second.info["truncated_by"] == "turn_limit"
    await env.reset(TASK, seed=1)
    assert not (await env.step("a")).done, "reset must restart the turn count"


async def test_turn_limit_keeps_natural_termination() -> None:
    env = TurnLimit(CountdownEnv(), max_turns=3)
    await env.reset(TASK)
    steps = [await env.step("x") for _ in range(3)]
    assert (steps[-1].terminated, steps[-1].truncated) == (True, False)


def test_turn_limit_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        TurnLimit(CountdownEnv(), max_turns=0)


async def test_recorder_keeps_episodes_and_writes_json_lines(tmp_path: Path) -> None:
    inner = CountdownEnv()
    env = Recorder(TurnLimit(inner, max_turns=10), path=tmp_path / "episodes.jsonl")
    for _ in range(2):
        await env.reset(TASK, seed=0)
        while not (await env.step("next")).done:
            pass
    await env.reset(TASK, seed=0)
    await env.step("half")
    await env.aclose()
    assert inner.closed == 1 and env.unwrapped is inner
    assert [len(e.steps) for e in env.episodes] == [3, 3, 1]
    assert env.episodes[0].episode_return == 1.0
    lines = [json.loads(x) for x in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(lines) == 3, "a half-finished episode is written when the env closes"
    assert lines[0]["task"]["id"] == "t"
    assert lines[0]["steps"][-1]["terminated"] is True
    assert lines[0]["steps"][0]["observation"][0]["role"] == "user"


def test_wrappers_pass_what_the_runner_reads_after_reset_through() -> None:
    class Ruled(CountdownEnv):
        tools = ({"type": "function", "function": {"name": "f", "parameters": {}}},)
        stop = ("</search>",)
        system_prompt = "Count down."

    inner = Ruled()
    wrapped = TurnLimit(Recorder(inner), 3)
    assert (wrapped.tools, wrapped.stop, wrapped.system_prompt) == (
        Ruled.tools,
        ("</search>",),
        "Count down.",
    )
    wrapped.stop, wrapped.system_prompt = ("Observation:",), None  # as a reset may set them
    assert (inner.stop, inner.system_prompt) == (("Observation:",), None)
