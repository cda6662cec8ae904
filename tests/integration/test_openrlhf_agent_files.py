"""Unmodified OpenRLHF agent files that use torch run in the openrlhf_agent env."""

from pathlib import Path

import pytest

from agenthub import Task, make

pytestmark = [pytest.mark.anyio, pytest.mark.integration]
torch = pytest.importorskip("torch", reason="this OpenRLHF agent file imports torch (train extra)")


async def test_old_style_async_init_tensor_rewards_and_five_argument_executor(
    fixtures: Path,
) -> None:
    env = make("openrlhf_agent", agent_func=str(fixtures / "agent_func_old.py"))
    observation, _ = await env.reset(Task(id="t", prompt="Human: hi\n\nAssistant: "))
    steps = [await env.step(" hello") for _ in range(3)]
    await env.aclose()
    assert observation == ""
    assert [s.reward for s in steps] == [0.0, 0.0, 1.0]
    assert [s.terminated for s in steps] == [False, False, True]
    assert steps[0].observation.startswith("\n\nHuman: [INCORRECT]")
    assert steps[-1].extra_logs == {"dummy_scores": 1.0}
