"""OpenRLHF's `examples/python/math_reward_func.py`, unmodified, scores in the reward_func env
without OpenRLHF installed (it imports torch, so it needs the train extra)."""

from pathlib import Path

import pytest

from agenthub import Task, make
from agenthub.envs import _openrlhf

pytestmark = [pytest.mark.anyio, pytest.mark.integration]
torch = pytest.importorskip("torch", reason="OpenRLHF reward files need the train extra")


@pytest.mark.parametrize("processes", [0, 1])
async def test_openrlhf_math_reward_file_scores_boxed_answers(
    fixtures: Path, processes: int
) -> None:
    assert not _openrlhf.installed(), "this test is about running without OpenRLHF"
    env = make(
        "reward_func",
        reward_func=str(fixtures / "openrlhf_math_reward_func.py"),
        reward_processes=processes,
    )
    rewards = []
    for reply in ("So it is \\boxed{\\dfrac{1}{2}}.", "It is \\boxed{0.4}.", "It is 0.5."):
        await env.reset(Task(id="t", prompt="What is 1/2 as a decimal? ", label="0.5"))
        step = await env.step(reply)
        rewards.append((step.reward, step.score))
        assert step.extra_logs["math_accuracy"] == step.reward
    await env.aclose()
    assert rewards == [(1.0, 1.0), (0.0, 0.0), (0.0, 0.0)]
