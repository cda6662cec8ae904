"""The parts the adapters share, without the foreign packages: seeded splits, per-game
global random state, and verifiers' message shapes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from agenthub import Message
from agenthub.envs._foreign import HELD_OUT_SEED_OFFSET, OwnRandom, game_seeds
from agenthub.envs.verifiers._messages import to_agenthub


def test_game_seeds_split_by_the_stated_rule() -> None:
    assert list(game_seeds("train", seed=5, num_tasks=3, env="x")) == [5, 6, 7]
    held_out = game_seeds("held_out", seed=5, num_tasks=2, env="x")
    assert list(held_out) == [5 + HELD_OUT_SEED_OFFSET, 6 + HELD_OUT_SEED_OFFSET]
    with pytest.raises(ValueError, match="x has the splits 'train' and 'held_out', not 'test'"):
        game_seeds("test", seed=0, num_tasks=1, env="x")


def draws(seed: int) -> tuple[float, float]:
    random.seed(seed)
    np.random.seed(seed)
    return random.random(), float(np.random.random())


def next_draws() -> tuple[float, float]:
    return random.random(), float(np.random.random())


def test_each_game_draws_from_its_own_global_random_state() -> None:
    alone = OwnRandom()
    expected = [alone.run(lambda: draws(1)), alone.run(next_draws), alone.run(next_draws)]
    first, second = OwnRandom(), OwnRandom()
    random.seed(99)
    outside = random.getstate()
    got = [first.run(lambda: draws(1))]
    second.run(lambda: draws(2))  # another game seeding in between changes nothing
    got.append(first.run(next_draws))
    second.run(next_draws)
    got.append(first.run(next_draws))
    assert got == expected
    assert random.getstate() == outside, "the process's own state is put back"


def test_verifiers_messages_become_agenthub_messages() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "content": "42", "tool_call_id": "call-1"},
    ]
    assert to_agenthub(messages) == [
        Message(role="system", content="Be brief."),
        Message(role="user", content="a"),
        Message(role="assistant", content=""),
        Message(role="tool", content="42", tool_call_id="call-1"),
    ]
    with pytest.raises(ValueError, match="role 'text' has no agenthub equivalent"):
        to_agenthub([{"role": "text", "content": "raw"}])
