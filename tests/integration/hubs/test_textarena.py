"""The textarena adapter on the real TextArena package."""

from __future__ import annotations

import random

import pytest

import agenthub
from agenthub.envs.textarena import TextArenaEnv
from agenthub.testing import check_env

pytestmark = [pytest.mark.integration, pytest.mark.anyio]

SOLUTION = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]


async def test_tower_of_hanoi_solved_by_a_scripted_move_list_gets_reward_1() -> None:
    env = agenthub.make("textarena", env_id="TowerOfHanoi-v0", num_tasks=2)
    task = next(iter(env.tasks("train")))
    assert isinstance(task.prompt, str) and "Tower of Hanoi with 3 disks" in task.prompt
    observation, _ = await env.reset(task, seed=0)
    assert observation == [], "the game's opening is the task's prompt, not said twice"
    for move in SOLUTION[:-1]:
        step = await env.step(move)
        assert not step.done and step.reward == 0.0
        # Only what is new: this move's result and the board, not the transcript.
        [message] = step.observation
        assert "Tower of Hanoi" not in message.content and move not in message.content
        assert message.content.count("Current Board") == 1
    last = await env.step(SOLUTION[-1])
    assert (last.reward, last.score, last.terminated) == (1.0, 1.0, True)
    assert last.extra_logs == {"turn_count": 7.0, "invalid_move": 0.0}
    assert "solved" in last.info["reason"]


async def test_an_invalid_move_is_answered_then_ends_the_game_unsolved() -> None:
    env = TextArenaEnv(env_id="TowerOfHanoi-v0", num_tasks=1)
    await env.reset(next(iter(env.tasks())))
    first = await env.step("I move the big disk")
    assert not first.done and "invalid move" in first.observation[0].content
    last = await env.step("[C A]")
    assert last.terminated and last.score == 0.0 and last.extra_logs["invalid_move"] == 1.0


async def test_a_game_seeded_by_its_task_replays_whatever_else_uses_random() -> None:
    env = TextArenaEnv(env_id="Minesweeper-v0-small", num_tasks=2)
    tasks = list(env.tasks())
    assert tasks[0].prompt != tasks[1].prompt or tasks[0].id != tasks[1].id

    async def play() -> list[str]:
        await env.reset(tasks[0])
        random.random()  # another episode's draws between moves change nothing
        steps = [await env.step(move) for move in ("[2 2]", "[0 0]", "[4 4]")]
        return [m.content for s in steps for m in s.observation]

    assert await play() == await play()


async def test_a_game_that_downloads_a_word_list_fails_its_episode_saying_so() -> None:
    env = agenthub.make("textarena", env_id="Wordle-v0", num_tasks=1)
    task = next(iter(env.tasks()))
    with pytest.raises(
        agenthub.AgentHubError, match=r"textarena could not reach the network while start"
    ):
        await env.reset(task)


def test_an_unknown_game_fails_when_made_naming_ids_like_it() -> None:
    with pytest.raises(agenthub.EnvArgumentsError, match="TowerOfHanoi-v0-medium"):
        agenthub.make("textarena", env_id="TowerOfHanoi-v9")


def test_check_env_passes() -> None:
    check_env(lambda: agenthub.make("textarena", env_id="TowerOfHanoi-v0", num_tasks=2))
    check_env(lambda: agenthub.make("textarena", env_id="GuessTheNumber-v0", num_tasks=2))


def test_known_ids_say_which_games_run_offline() -> None:
    known = TextArenaEnv.known_ids()
    assert known["TowerOfHanoi-v0"] is True and known["Minesweeper-v0-small"] is True
    assert known["Wordle-v0"] is False and known["Hangman-v0"] is False
    assert known["TwentyQuestions-v0"] is False, "its game master is a hosted model"
    assert "Chess-v0" not in known, "two-player games are not offered"
