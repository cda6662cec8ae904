"""Unmodified OpenRLHF reward files, which import torch, run in the reward_func env."""

from pathlib import Path

import pytest

from agenthub import Task, make
from agenthub.testing import check_env

pytestmark = [pytest.mark.anyio, pytest.mark.integration]
torch = pytest.importorskip("torch", reason="OpenRLHF reward files need the train extra")


async def test_current_signature_with_tensor_dict(fixtures: Path) -> None:
    env = make("reward_func", reward_func=str(fixtures / "openrlhf_reward_labels.py"))
    await env.reset(Task(id="t", prompt="What is 2+3? ", label="5"))
    step = await env.step("It is 5.")
    assert (step.reward, step.score) == (1.0, 1.0)
    assert step.extra_logs == {"response_length": float(len("What is 2+3? It is 5."))}


async def test_older_signature_with_bare_tensor(fixtures: Path) -> None:
    env = make("reward_func", remote_rm_url=str(fixtures / "openrlhf_reward_old.py"))
    await env.reset(Task(id="t", prompt="Hi"))
    step = await env.step("x" * 50)
    assert step.reward == pytest.approx(0.5) and step.score is None


def test_both_files_pass_check_env(fixtures: Path) -> None:
    for name in ("openrlhf_reward_labels.py", "openrlhf_reward_old.py"):
        check_env(
            lambda n=name: make(
                "reward_func", reward_func=str(fixtures / n), dataset=str(fixtures / "tasks.jsonl")
            )
        )
