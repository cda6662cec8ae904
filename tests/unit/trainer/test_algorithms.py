"""Each estimator, correction and loss against a plain-Python reference computation."""

import itertools
import math
import random
import statistics

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer import (  # noqa: E402
    ESTIMATORS,
    advantages,
    filter_groups,
    gae,
    importance_weights,
    kl_divergence,
    policy_loss,
)


def reference_advantages(rewards: list[float], n: int, estimator: str) -> list[float]:
    out = []
    for g in range(0, len(rewards), n):
        group = rewards[g : g + n]
        mean = sum(group) / n
        for i, r in enumerate(group):
            if estimator == "group_norm":
                std = statistics.stdev(group) if n > 1 else 0.0
                out.append((r - mean) / (std + 1e-6))
            elif estimator in ("dr_grpo", "reinforce_baseline"):
                out.append(r - mean)
            elif estimator == "rloo":
                others = [x for j, x in enumerate(group) if j != i]
                out.append(r - sum(others) / len(others))
            elif estimator == "reinforce":
                out.append(r)
    if estimator in ("reinforce", "reinforce_baseline"):  # whitened over the batch
        mean, std = statistics.fmean(out), statistics.pstdev(out)
        out = [(a - mean) / std for a in out]
    return out


@pytest.mark.parametrize("estimator", sorted(ESTIMATORS))
def test_estimators_match_reference(estimator: str) -> None:
    rng = random.Random(estimator)
    rewards = [rng.choice([0.0, 0.25, 1.0]) + rng.random() for _ in range(24)]
    got = advantages(rewards, 4, estimator).tolist()
    assert got == pytest.approx(reference_advantages(rewards, 4, estimator), abs=1e-5)


@pytest.mark.parametrize("estimator", ["group_norm", "dr_grpo", "rloo", "reinforce_baseline"])
def test_group_of_identical_rewards_has_zero_advantage(estimator: str) -> None:
    got = advantages([1.0] * 4 + [0.0, 1.0, 0.0, 1.0], 4, estimator)
    assert torch.isfinite(got).all()
    assert got[:4].tolist() == [0.0] * 4


def test_edge_cases_of_advantages() -> None:
    assert advantages([], 4).numel() == 0, "empty groups after filtering give empty output"
    assert advantages([3.0], 1, "group_norm").tolist() == [0.0]
    with pytest.raises(ValueError, match="rloo needs n_samples_per_prompt >= 2"):
        advantages([1.0, 2.0], 1, "rloo")
    with pytest.raises(ValueError, match="do not split into groups of 4"):
        advantages([1.0] * 6, 4)
    with pytest.raises(ValueError, match="call agenthub.trainer.gae"):
        advantages([1.0] * 4, 4, "gae")
    with pytest.raises(ValueError, match="unknown estimator 'ppo'"):
        advantages([1.0] * 4, 4, "ppo")


def test_gae_matches_reference_and_skips_env_tokens() -> None:
    rewards = [[0.0, 0.0, 0.0, 0.0, 1.0], [0.0, 0.5, 0.0, 0.0, 0.0]]
    values = [[0.1, 0.2, 0.9, 0.3, 0.4], [0.5, 0.4, 0.3, 0.2, 0.1]]
    mask = [[1, 1, 0, 1, 1], [1, 1, 1, 1, 0]]
    gamma, lam = 0.9, 0.8
    expected = []
    for r, v, m in zip(rewards, values, mask, strict=True):
        idx = [t for t in range(5) if m[t]]
        adv = [0.0] * 5
        running, next_v = 0.0, 0.0
        for t in reversed(idx):
            delta = r[t] + gamma * next_v - v[t]
            running = delta + gamma * lam * running
            adv[t] = running
            next_v = v[t]
        expected.append(adv)
    got, returns = gae(
        torch.tensor(rewards), torch.tensor(values), torch.tensor(mask), gamma=gamma, lam=lam
    )
    assert got.tolist() == [pytest.approx(row, abs=1e-6) for row in expected]
    assert returns[0, 2] == 0.0 and returns[0, 0] == pytest.approx(expected[0][0] + 0.1)


def test_filter_groups_drops_flat_groups_and_out_of_range_means() -> None:
    keep = filter_groups([0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0], 4, low=0.1, high=0.9)
    assert keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4
    assert filter_groups([0.2, 0.4], 2, low=0.5, high=1.0).tolist() == [False, False]


def reference_weights(old, rollout, mask, mode, low, high):  # type: ignore[no-untyped-def]
    weights = []
    for o_row, r_row, m_row in zip(old, rollout, mask, strict=True):
        ratios = [math.exp(o - r) for o, r, m in zip(o_row, r_row, m_row, strict=True) if m]
        geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else 1.0
        row = []
        for o, r, m in zip(o_row, r_row, m_row, strict=True):
            ratio = math.exp(o - r)
            if not m:
                row.append(0.0)
            elif mode == "tis":
                row.append(min(max(ratio, low), high))
            elif mode == "icepop":
                row.append(ratio if low <= ratio <= high else 0.0)
            else:
                row.append(min(max(ratio, low), high) if low <= geo <= high else 0.0)
        weights.append(row)
    return weights


@pytest.mark.parametrize("mode", ["tis", "icepop", "seq-mask-tis"])
def test_importance_weights_match_reference(mode: str) -> None:
    rng = random.Random(mode)
    old = [[rng.gauss(-1, 1) for _ in range(6)] for _ in range(5)]
    rollout = [[o + rng.gauss(0, 0.8) for o in row] for row in old]
    rollout[2] = [o - 3.0 for o in old[2]]  # a sequence far off-policy: geo ratio e^3
    mask = [[1, 1, 1, 0, 1, 1], [1] * 6, [1, 1, 1, 1, 0, 0], [0] * 6, [0, 1, 1, 1, 1, 1]]
    got = importance_weights(
        torch.tensor(old), torch.tensor(rollout), torch.tensor(mask), mode, 0.5, 5.0
    )
    expected = reference_weights(old, rollout, mask, mode, 0.5, 5.0)
    assert got.weights.tolist() == [pytest.approx(row, rel=1e-5) for row in expected]
    assert got.weights[3].tolist() == [0.0] * 6, "an all-masked sequence gets zero weights"
    model_tokens = sum(map(sum, mask))
    pairs = zip(itertools.chain(*expected), itertools.chain(*mask), strict=True)
    zeroed = sum(1 for e, m in pairs if m and e == 0)
    assert got.masked_fraction == pytest.approx(zeroed / model_tokens)
    if mode == "seq-mask-tis":
        assert got.weights[2].abs().sum() == 0


def test_importance_weights_reject_bad_arguments() -> None:
    t = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="unknown importance mode"):
        importance_weights(t, t, t, "clip")
    with pytest.raises(ValueError, match="0 < low <= 1 <= high"):
        importance_weights(t, t, t, "tis", 2.0, 5.0)


def test_kl_estimators_match_definitions() -> None:
    logp, ref = torch.tensor([[-1.0, -2.0, -0.5]]), torch.tensor([[-1.5, -1.0, -0.5]])
    mask = torch.tensor([[1, 1, 0]])
    for name, fn in {
        "k1": lambda a, b: a - b,
        "k2": lambda a, b: 0.5 * (a - b) ** 2,
        "k3": lambda a, b: math.exp(b - a) - (b - a) - 1,
    }.items():
        got = kl_divergence(logp, ref, mask, name)[0].tolist()
        want = [fn(a, b) for a, b in zip(logp[0].tolist()[:2], ref[0].tolist()[:2], strict=True)]
        assert got == pytest.approx([*want, 0.0])


def test_policy_loss_matches_reference_with_asymmetric_clip_and_weights() -> None:
    logp = torch.tensor([[-1.0, -0.2, -3.0], [-0.5, -0.5, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.2, -1.0, -1.0], [-0.5, -0.1, -2.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([1.0, -2.0])
    weights = torch.tensor([[1.0, 0.5, 2.0], [1.0, 1.0, 0.0]])
    out = policy_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28, weights=weights)
    terms = []
    for b in range(2):
        for t in range(3):
            if not mask[b, t]:
                continue
            ratio = math.exp(float(logp[b, t].detach() - old[b, t]))
            a = float(adv[b])
            clipped_ratio = min(max(ratio, 0.8), 1.28)
            terms.append(max(-a * ratio, -a * clipped_ratio) * float(weights[b, t]))
    assert out.loss.item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    out.loss.backward()
    assert logp.grad is not None and logp.grad[1, 2] == 0
    seq = policy_loss(
        logp.detach(), old, adv, mask, aggregation="seq-mean-token-sum-norm", max_tokens=10
    )
    assert torch.isfinite(seq.loss)


def test_policy_loss_with_all_masked_batch_is_zero_not_nan() -> None:
    z = torch.zeros(2, 3)
    out = policy_loss(z, z, torch.ones(2), z)
    assert out.loss.item() == 0.0 and out.clip_fraction == 0.0


def test_trainer_public_names() -> None:
    import agenthub.trainer as trainer

    assert sorted(trainer.__all__) == sorted(set(trainer.__all__))
    assert all(hasattr(trainer, name) for name in trainer.__all__)
