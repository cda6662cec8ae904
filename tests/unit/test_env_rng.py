"""`Env.np_random`, built on first use after `reseed`: the draws a seed gives stay the same."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit._envs import CountdownEnv


def test_a_reseeded_env_draws_what_default_rng_of_its_seed_draws() -> None:
    env = CountdownEnv()
    env.reseed(7)
    first = env.np_random.random(3)
    env.reseed(7)
    assert np.array_equal(env.np_random.random(3), first)
    assert np.array_equal(first, np.random.default_rng(7).random(3))


def test_reseed_restarts_the_draws_even_after_some_were_taken() -> None:
    env = CountdownEnv()
    env.reseed(1)
    env.np_random.random(5)
    env.reseed(2)
    assert np.array_equal(env.np_random.random(2), np.random.default_rng(2).random(2))


def test_reseed_none_and_no_reseed_give_a_generator_from_entropy() -> None:
    env, other = CountdownEnv(), CountdownEnv()
    env.reseed(None)
    assert not np.array_equal(env.np_random.random(4), other.np_random.random(4))


@pytest.mark.anyio
async def test_an_episode_s_seed_leaves_the_env_s_own_task_seed_alone() -> None:
    # `reseed` keeps its seed apart from a subclass's attributes: `math` keeps the seed of the
    # tasks it generates in `_seed`, and an episode's seed once overwrote it.
    from agenthub.envs.math import MathEnv

    env = MathEnv(num_tasks=4, seed=3)
    tasks = list(env.tasks())
    await env.reset(tasks[0], seed=99)
    assert list(env.tasks()) == tasks
