"""Reward shaping before advantages (`reward.*`): each rule against OpenRLHF's formulas, the
mapping onto multi-turn episodes, and the shaped rewards through `Batch.collate` and the log."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Literal

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.agents import Trajectory  # noqa: E402
from agenthub.trainer._advantages import advantages  # noqa: E402
from agenthub.trainer._assembly import Batch  # noqa: E402
from agenthub.trainer._config import ConfigError, load_config  # noqa: E402
from agenthub.trainer._loop import Trainer  # noqa: E402
from agenthub.trainer._metrics import ShapingStats, StepTiming, read_metrics  # noqa: E402
from agenthub.trainer._shaping import (  # noqa: E402
    RewardConfig,
    RewardShaping,
    longest_reply,
    overlong_penalty,
    stop_properly_penalty,
)

from ._fakes import FakeCluster  # noqa: E402
from ._fakes import trajectory as _trajectory  # noqa: E402

Reason = Literal["stop", "length"]


def episode(reward: float, replies: list[int], reasons: list[Reason] | None = None) -> Trajectory:
    """A trajectory of a 2-token prompt, then each reply of `replies[i]` model tokens followed
    by 3 env tokens."""
    mask = [0, 0]
    for n in replies:
        mask += [1] * n + [0] * 3
    return _trajectory(reward, 0).model_copy(
        update={
            "tokens": [7] * len(mask),
            "loss_mask": mask,
            "logprobs": [0.0] * len(mask),
            "policy_versions": [0] * len(mask),
            "num_turns": len(replies),
            "finish_reasons": reasons or ["stop"] * len(replies),
        }
    )


# -- each rule against OpenRLHF's formulas ------------------------------------------------


def _dapo(length: int, max_len: int, cache: int) -> float:
    """DAPO's soft overlong punishment as the paper writes it (Yu et al. 2025, eq. 13)."""
    if length <= max_len - cache:
        return 0.0
    if length <= max_len:
        return ((max_len - cache) - length) / cache
    return -1.0


def test_the_overlong_penalty_is_dapos_soft_punishment_scaled_by_the_factor() -> None:
    rng = random.Random(0)
    for _ in range(500):
        max_len = rng.randint(8, 400)
        buffer = rng.randint(1, max_len)
        length = rng.randint(0, max_len + 50)
        factor = rng.choice([0.5, 1.0, 2.0])
        got = overlong_penalty(length, max_len, buffer, factor)
        assert got == pytest.approx(factor * _dapo(length, max_len, buffer), abs=1e-12)
    assert overlong_penalty(96, 128, 32, 1.0) == 0.0, "up to the buffer: no penalty"
    assert overlong_penalty(112, 128, 32, 1.0) == -0.5
    assert overlong_penalty(128, 128, 32, 1.0) == overlong_penalty(500, 128, 32, 1.0) == -1.0


def test_the_stop_properly_penalty_scales_or_replaces_as_openrlhf_does() -> None:
    assert stop_properly_penalty(0.8, 0.5) == 0.4
    assert stop_properly_penalty(0.8, 0.0) == 0.0
    assert stop_properly_penalty(0.8, 1.0) == 0.8
    assert stop_properly_penalty(0.8, -0.5) == -0.5, "a negative coefficient is the reward"
    assert stop_properly_penalty(-3.0, -0.5) == -0.5


def _openrlhf_advantages(
    rewards: torch.Tensor, counts: torch.Tensor, n: int, estimator: str, clip: tuple[float, float]
) -> torch.Tensor:
    """OpenRLHF's `compute_advantages_and_returns` as published, for one advantage per
    sequence repeated over its tokens: group baseline, `compute_reward`'s clamp, then the
    token-weighted whitening of reinforce and reinforce_baseline."""
    r = rewards.reshape(-1, n).double()
    if estimator == "rloo":
        r = r - (r.sum(-1, keepdim=True) - r) / (n - 1)
    elif estimator in ("reinforce_baseline", "dr_grpo"):
        r = r - r.mean(-1, keepdim=True)
    elif estimator == "group_norm":
        r = (r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-6)
    r = r.reshape(-1).clamp(min=clip[0], max=clip[1])
    if estimator in ("reinforce", "reinforce_baseline"):
        tokens = torch.repeat_interleave(r, counts)
        mean = tokens.mean()
        rstd = ((tokens - mean) ** 2).mean().clamp(min=1e-8).rsqrt()
        r = (r - mean) * rstd
    return r.float()


@pytest.mark.parametrize(
    "estimator", ["group_norm", "dr_grpo", "rloo", "reinforce", "reinforce_baseline"]
)
def test_the_clip_acts_where_openrlhf_clips_after_the_baseline(estimator: str) -> None:
    gen = torch.Generator().manual_seed(1)
    n, clip = 4, (-1.5, 2.0)
    rewards = torch.randn(24, generator=gen) * 4
    counts = torch.randint(1, 40, (24,), generator=gen)
    got = advantages(rewards, n, estimator, token_counts=counts, clip_range=clip)
    want = _openrlhf_advantages(rewards, counts, n, estimator, clip)
    assert torch.allclose(got, want, atol=1e-5)
    unclipped = advantages(rewards, n, estimator, token_counts=counts)
    if estimator != "group_norm":  # group_norm's z-scores of 4 samples stay within 1.5
        assert not torch.allclose(got, unclipped, atol=1e-3), "the clip must bind here"


# -- "length" and "stopped properly" in multi-turn episodes ------------------------------


def test_a_reply_is_a_run_of_model_tokens_and_the_longest_counts() -> None:
    assert longest_reply([0, 0, 1, 1, 1, 0, 1, 0]) == 3
    assert longest_reply([0, 0]) == 0
    assert longest_reply(episode(0.0, [5, 9, 2]).loss_mask) == 9


def test_an_episode_is_penalised_once_by_its_longest_reply() -> None:
    shaping = RewardShaping(RewardConfig(overlong_buffer_len=4, overlong_penalty_factor=1.0), 10)
    episodes = [
        episode(1.0, [6, 6, 6]),  # every reply stops before the buffer: 30 model tokens in all
        episode(1.0, [3, 8]),  # the second reply goes 2 tokens into the buffer
        episode(1.0, [12]),  # beyond the limit: the whole factor
    ]
    rewards, stats = shaping.rewards(episodes)
    assert rewards == [1.0, 0.5, 0.0]
    assert stats == [ShapingStats(rule="overlong", samples=2, change=0.75)]


def test_an_episode_with_a_cut_reply_never_stopped_properly() -> None:
    cut_last = episode(1.0, [10], ["length"])
    cut_middle = episode(0.8, [10, 4], ["length", "stop"])
    truncated_but_stopped = episode(0.6, [4, 4], ["stop", "stop"]).model_copy(
        update={"truncated": True, "terminated": False}
    )
    recorded_before = episode(0.4, [10], []).model_copy(update={"finish_reasons": []})
    episodes = [cut_last, cut_middle, truncated_but_stopped, recorded_before]
    scaled, stats = RewardShaping(RewardConfig(stop_properly_penalty_coef=0.5), 10).rewards(
        episodes
    )
    assert scaled == [0.5, 0.4, 0.6, 0.4]
    assert stats == [ShapingStats(rule="unstopped", samples=2, change=pytest.approx(0.45))]
    fixed, _ = RewardShaping(RewardConfig(stop_properly_penalty_coef=-1.0), 10).rewards(episodes)
    assert fixed == [-1.0, -1.0, 0.6, 0.4]


def test_the_overlong_penalty_comes_before_the_stop_properly_scale() -> None:
    both = RewardConfig(overlong_buffer_len=4, stop_properly_penalty_coef=0.5)
    rewards, stats = RewardShaping(both, 10).rewards([episode(1.0, [10], ["length"])])
    assert rewards == [0.0], "(1 - 1) * 0.5, as OpenRLHF orders them"
    assert [s.rule for s in stats] == ["overlong", "unstopped"]


def test_no_rule_on_leaves_the_rewards_and_logs_nothing() -> None:
    rewards, stats = RewardShaping(RewardConfig(), 10).rewards([episode(1.0, [10], ["length"])])
    assert (rewards, stats) == ([1.0], [])


# -- through Batch.collate, the step's record and the run's log --------------------------


def _collated(
    overrides: list[str], groups: list[list[Trajectory]]
) -> tuple[Batch, torch.Tensor, torch.Tensor | None]:
    cfg = load_config([], ["env=math", "rollout.max_reply_tokens=10", *overrides])
    batch = Batch(groups=groups, shaping=RewardShaping(cfg.reward, 10))
    train = batch.collate(cfg.algorithm)
    return batch, train.advantages, train.rewards


def test_advantages_see_the_shaped_rewards() -> None:
    groups = [
        [episode(1.0, [3]), episode(1.0, [8]), episode(0.0, [2]), episode(1.0, [10], ["length"])]
    ]
    overrides = [
        "reward.overlong_buffer_len=4",
        "reward.stop_properly_penalty_coef=0",
        "algorithm.estimator=rloo",
    ]
    batch, adv, _ = _collated(overrides, groups)
    shaped = [1.0, 0.5, 0.0, 0.0]
    assert batch.shaped == shaped
    assert adv.tolist() == pytest.approx(advantages(shaped, 4, "rloo").tolist(), abs=1e-6)
    record = batch.record(1, {}, queue_depth=0, timing=StepTiming(1.0, 1.0, 0.0, 1.0, 1.0))
    logged = record.to_json()
    assert logged["train/trained_reward"] == 0.75, "the env's reward stays as it was"
    assert logged["train/shaped_reward"] == 0.375
    assert logged["train/shaping/overlong_samples"] == 2
    assert logged["train/shaping/overlong_change"] == pytest.approx(0.75)
    assert logged["train/shaping/unstopped_samples"] == 1
    assert logged["train/shaping/unstopped_change"] == 0.0, "its penalty was already 1: 0 x 0"


def test_the_clip_in_collate_counts_what_it_clamped() -> None:
    groups = [[episode(30.0, [2]), episode(0.0, [2])]]
    batch, adv, _ = _collated(
        ["reward.clip_range=[-10, 10]", "algorithm.estimator=dr_grpo"], groups
    )
    assert adv.tolist() == [10.0, -10.0]
    assert batch.shaped is None, "no length penalty is on"
    assert batch.shaping_stats == [ShapingStats(rule="clipped", samples=2, change=5.0)]
    batch, _, rewards = _collated(
        ["reward.clip_range=[-10, 10]", "algorithm.estimator=gae"], groups
    )
    assert rewards is not None and rewards.tolist() == [10.0, 0.0], "the critic's rewards"
    assert batch.shaping_stats == [ShapingStats(rule="clipped", samples=1, change=20.0)]


def test_a_run_logs_what_shaping_did_in_metrics_jsonl(tmp_path: Path) -> None:
    # The fake cluster's episodes have replies of 2 model tokens, one scoring 1, one 0.
    overrides = [
        "env=math",
        "algorithm.batch_groups=2",
        "eval.every=0",
        "run.wandb=disabled",
        "run.max_steps=1",
        "rollout.max_reply_tokens=4",
        "reward.overlong_buffer_len=3",
    ]
    cfg = load_config([], overrides)
    trainer = Trainer(cfg, tmp_path, log=lambda _: None, cluster=lambda *a: FakeCluster(*a))
    assert trainer.run().steps == 1
    [record] = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "train/reward" in r]
    assert record["train/shaping/overlong_samples"] == 4
    assert record["train/shaping/overlong_change"] == pytest.approx(1 / 3)
    assert record["train/shaped_reward"] == pytest.approx(record["train/reward"] - 1 / 3)


# -- settings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("reward.clip_range=[10, -10]", "with low below high"),
        ("reward.stop_properly_penalty_coef=1.5", "must be in [0, 1]"),
        ("reward.overlong_buffer_len=200", "longer than a reply may be"),
    ],
)
def test_settings_that_cannot_mean_anything_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config([], ["env=math", "rollout.max_reply_tokens=160", override])


def test_agenthub_does_not_clip_unless_told_to() -> None:
    assert load_config([], ["env=math"]).reward.clip_range is None
