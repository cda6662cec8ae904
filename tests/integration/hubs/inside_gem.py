"""The gem adapter on the real gem package, run inside gem's own venv by test_gem.py (gem's
pins differ from agenthub's)."""

from __future__ import annotations

import re

import pytest

import agenthub
from agenthub.testing import check_env

pytestmark = [pytest.mark.integration, pytest.mark.anyio]


async def test_guess_the_number_is_won_by_a_scripted_player() -> None:
    env = agenthub.make("gem", env_id="game:GuessTheNumber-v0-easy", num_tasks=2)
    task = next(iter(env.tasks("train")))
    assert isinstance(task.prompt, str) and "Guess The Number" in task.prompt
    low, high = map(int, re.search(r"between (\d+) and (\d+)", task.prompt).groups())
    observation, _ = await env.reset(task, seed=0)
    assert observation == [], "the opening is the task's prompt, not said twice"
    # Bisection on the game's hints: it must win within the game's turns.
    for _ in range(20):
        guess = (low + high) // 2
        step = await env.step(f"My guess: \\boxed{{{guess}}}")
        if step.done:
            break
        [message] = step.observation
        assert "You are playing" not in message.content, "only what is new"
        if "is higher" in message.content:
            low = guess + 1
        else:
            high = guess - 1
    assert (step.terminated, step.reward, step.score) == (True, 1.0, 1.0), step
    assert "Congratulations" in step.observation[0].content


async def test_a_reply_without_a_guess_ends_the_game_lost() -> None:
    env = agenthub.make("gem", env_id="game:GuessTheNumber-v0-easy", num_tasks=1)
    await env.reset(next(iter(env.tasks())))
    step = await env.step("I have no idea")
    assert step.terminated and step.score == 0.0 and step.reward < 1.0


async def test_an_env_that_loads_a_dataset_from_a_hub_fails_its_episode_saying_so() -> None:
    env = agenthub.make("gem", env_id="math:GSM8K", num_tasks=1)
    task = next(iter(env.tasks()))
    with pytest.raises(
        agenthub.AgentHubError, match=r"^gem (could not reach the network|raised) while"
    ):
        await env.reset(task)


def test_check_env_passes() -> None:
    check_env(lambda: agenthub.make("gem", env_id="game:GuessTheNumber-v0-easy", num_tasks=2))
    check_env(lambda: agenthub.make("gem", env_id="game:Minesweeper-v0-easy", num_tasks=2))


def test_known_ids_say_which_envs_run_offline() -> None:
    from agenthub.envs.gem import GemEnv

    known = GemEnv.known_ids()
    assert known["game:GuessTheNumber-v0-easy"] is True
    assert known["game:Sudoku-v0-easy"] is True
    assert known["game:Wordle-v0-easy"] is False, "it downloads nltk's word list"
    assert known["math:GSM8K"] is False, "it loads its dataset from a hub"
