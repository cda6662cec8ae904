"""agenthub's estimators against OpenRLHF's, computed here by its published formulas.

The reference follows `compute_advantages_and_returns` of OpenRLHF's experience maker, per
token: group shaping of the rewards, the reward on each response's last token plus
`-kl_coef * kl` on every token, cumulative returns (or GAE with a critic's values), then for
`gae`, `reinforce` and `reinforce_baseline` whitening over all model tokens of the batch
(biased variance clamped at 1e-8; `no_std_norm` keeps only the mean). It is written in numpy,
independently of agenthub's torch code.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer import ESTIMATORS, advantages, gae, whiten  # noqa: E402
from agenthub.trainer._config import AlgorithmConfig  # noqa: E402


def openrlhf_token_advantages(
    rewards: np.ndarray,
    counts: np.ndarray,
    n: int,
    estimator: str,
    *,
    no_std_norm: bool = False,
    kl: np.ndarray | None = None,
    kl_coef: float = 0.0,
    values: np.ndarray | None = None,
    gamma: float = 1.0,
    lambd: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """[B, T] advantages over responses right-padded to T, and the [B, T] action mask."""
    r = rewards.reshape(-1, n).astype(np.float64)
    if estimator == "rloo":
        r = r - (r.sum(-1, keepdims=True) - r) / (n - 1)
    elif estimator in ("reinforce_baseline", "dr_grpo"):
        r = r - r.mean(-1, keepdims=True)
    elif estimator == "group_norm":
        r = (r - r.mean(-1, keepdims=True)) / (r.std(-1, ddof=1, keepdims=True) + 1e-9)
    r = r.reshape(-1)
    width = int(counts.max())
    mask = (np.arange(width)[None, :] < counts[:, None]).astype(np.float64)
    kl = np.zeros_like(mask) if kl is None else kl
    token_rewards = -kl_coef * kl
    for i, c in enumerate(counts):
        token_rewards[i, c - 1] += r[i]
    token_rewards = token_rewards * mask
    adv = np.zeros_like(mask)
    if estimator == "gae":
        assert values is not None
        v = values * mask
        last = np.zeros(len(r))
        for t in reversed(range(width)):
            next_v = v[:, t + 1] if t < width - 1 else 0.0
            delta = token_rewards[:, t] + gamma * next_v - v[:, t]
            last = delta + gamma * lambd * last
            adv[:, t] = last
    else:
        running = np.zeros(len(r))
        for t in reversed(range(width)):
            running = token_rewards[:, t] + gamma * running
            adv[:, t] = running
    if estimator in ("gae", "reinforce", "reinforce_baseline"):
        total = mask.sum()
        mean = (adv * mask).sum() / total
        rstd = 1.0
        if not no_std_norm:
            var = ((adv - mean) ** 2 * mask).sum() / total
            rstd = 1.0 / np.sqrt(max(var, 1e-8))
        adv = (adv - mean) * rstd
    return adv, mask


def _batch(seed: int, groups: int = 6, n: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rewards = rng.choice([0.0, 1.0], size=groups * n) + rng.uniform(-0.5, 0.5, groups * n)
    rewards[:n] = 0.75  # a group of identical rewards
    counts = rng.integers(1, 40, size=groups * n)
    return rewards, counts


@pytest.mark.parametrize("no_std_norm", [False, True])
@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_sequence_estimators_equal_openrlhf_per_token(estimator: str, no_std_norm: bool) -> None:
    rewards, counts = _batch(seed=len(estimator) + 7 * no_std_norm)
    expected, mask = openrlhf_token_advantages(
        rewards, counts, 4, estimator, no_std_norm=no_std_norm
    )
    got = advantages(
        rewards.tolist(), 4, estimator, token_counts=counts.tolist(), std_norm=not no_std_norm
    ).numpy()
    # Every model token of a sequence carries the sequence's advantage in OpenRLHF.
    per_token = np.repeat(got[:, None], mask.shape[1], axis=1)
    np.testing.assert_allclose(per_token[mask > 0], expected[mask > 0], atol=1e-5)


def test_token_counts_change_whitened_estimators_only() -> None:
    rewards, counts = _batch(seed=3)
    for estimator in sorted(ESTIMATORS):
        equal = advantages(rewards.tolist(), 4, estimator)
        weighted = advantages(rewards.tolist(), 4, estimator, token_counts=counts.tolist())
        changed = not torch.allclose(equal, weighted, atol=1e-6)
        assert changed == (estimator in ("reinforce", "reinforce_baseline")), estimator


def test_reinforce_gives_zero_one_rewards_signed_advantages() -> None:
    got = advantages([0.0, 1.0, 1.0, 0.0, 1.0, 1.0], 2, "reinforce", token_counts=[5] * 6)
    assert (got[[0, 3]] < 0).all() and (got[[1, 2, 4, 5]] > 0).all()
    assert float(got.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(got.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)


def test_token_counts_must_fit_the_rewards() -> None:
    with pytest.raises(ValueError, match="one count of model tokens"):
        advantages([1.0, 0.0], 2, "reinforce", token_counts=[3])
    with pytest.raises(ValueError, match="one count of model tokens"):
        advantages([1.0, 0.0], 2, "reinforce", token_counts=[3, -1])


def test_gae_with_kl_in_reward_equals_openrlhf() -> None:
    rng = np.random.default_rng(11)
    rewards, counts = _batch(seed=5, groups=3, n=3)
    kl_coef, gamma, lambd = 0.05, 0.97, 0.9
    width = int(counts.max())
    kl = rng.uniform(0, 0.3, size=(len(counts), width))
    values = rng.normal(0, 0.5, size=(len(counts), width))
    expected, mask = openrlhf_token_advantages(
        rewards, counts, 3, "gae", kl=kl, kl_coef=kl_coef, values=values, gamma=gamma, lambd=lambd
    )
    # agenthub's layout: the prompt's tokens come first (mask 0), then the response.
    prompt = 5
    ours_mask = np.concatenate([np.zeros((len(counts), prompt)), mask], axis=1)
    pad = np.zeros((len(counts), prompt))
    ours_values = np.concatenate([pad, values], axis=1) * ours_mask
    token_rewards = -kl_coef * np.concatenate([pad, kl], axis=1)
    for i, c in enumerate(counts):
        token_rewards[i, prompt + c - 1] += rewards[i]
    token_rewards = token_rewards * ours_mask
    adv, _ = gae(
        torch.tensor(token_rewards, dtype=torch.float32),
        torch.tensor(ours_values, dtype=torch.float32),
        torch.tensor(ours_mask),
        gamma=gamma,
        lam=lambd,
    )
    got = whiten(adv, torch.tensor(ours_mask)).numpy()[:, prompt:]
    np.testing.assert_allclose(got[mask > 0], expected[mask > 0], atol=1e-5)
    assert (got[mask == 0] == 0).all()


def test_whiten_of_an_empty_batch_is_zero() -> None:
    assert whiten(torch.tensor([1.0, 2.0]), torch.tensor([0, 0])).tolist() == [0.0, 0.0]


def test_std_norm_is_on_by_default_as_in_openrlhf() -> None:
    assert AlgorithmConfig().advantage_std_norm is True
