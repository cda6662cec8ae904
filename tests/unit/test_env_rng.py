"""`Env.np_random`, built on first use after `reseed`: the draws a seed gives stay the same."""

from __future__ import annotations

import numpy as np

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
