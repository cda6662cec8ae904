"""Reward shaping before advantages, as OpenRLHF's `--reward.*` settings do it: DAPO's overlong
buffer and ProRL's stop-properly penalty on each episode's reward, and the clip of each
sequence's reward after its group's baseline (see `RewardConfig` for how "length" and
"stopped properly" map onto multi-turn episodes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field, model_validator

from agenthub.agents import Trajectory
from agenthub.trainer._metrics import ShapingRule, ShapingStats
from agenthub.trainer._section import ConfigSection

if TYPE_CHECKING:
    import torch

__all__ = [
    "RewardConfig",
    "RewardShaping",
    "longest_reply",
    "overlong_penalty",
    "stop_properly_penalty",
]


class RewardConfig(ConfigSection):
    """How each episode's reward is shaped before advantages, as OpenRLHF's `--reward.*`
    settings do: the length penalties on the env's reward, then the clip on each sequence's
    reward after its group's baseline. `train/reward` stays the env's reward; metrics.jsonl
    logs what each rule changed (`train/shaping/...`)."""

    clip_range: tuple[float, float] | None = None
    """Clamp each sequence's reward to [low, high] after its group's baseline (the value
    `group_norm`, `rloo`, `dr_grpo` and `reinforce_baseline` give; the reward itself for
    `reinforce` and `gae`), before the batch whitening: where and how OpenRLHF's
    `--reward.clip_range` clips. OpenRLHF clips at (-10, 10) by default; agenthub does not
    clip unless told to, because env rewards have their own scale (a score out of 100 would be
    flattened without a word), and after `group_norm` (agenthub's default) the clip binds only
    for groups of more than about 100 samples. `agenthub config from-openrlhf` writes
    OpenRLHF's range out, so a translated recipe clips as it did."""
    overlong_buffer_len: int | None = Field(None, ge=1)
    """DAPO's overlong buffer (`--reward.overlong_buffer_len`): an episode whose longest reply
    has more than `rollout.max_reply_tokens - overlong_buffer_len` tokens loses
    `overlong_penalty_factor` times the share of the buffer it went into (the whole factor at
    the limit). A reply is a run of model tokens (`loss_mask` 1); a single-turn episode's reply
    is OpenRLHF's response. OpenRLHF measures a multi-turn sample from its first model token to
    its last, env tokens included, against the per-reply limit; agenthub measures each reply
    against `rollout.max_reply_tokens` and penalises the episode once, by its longest reply.
    None: off."""
    overlong_penalty_factor: float = Field(1.0, ge=0)
    """The most the overlong buffer takes off an episode's reward (OpenRLHF's
    `--reward.overlong_penalty_factor`)."""
    stop_properly_penalty_coef: float | None = None
    """ProRL's penalty for replies that never stopped properly (OpenRLHF's
    `--reward.stop_properly_penalty_coef`): an episode with a reply the engine cut at its token
    limit (finish reason `length`: `rollout.max_reply_tokens`, or the room left under
    `rollout.max_tokens`) has its reward (after the overlong penalty) multiplied by this when it
    is in [0, 1], or replaced by it when it is negative. OpenRLHF judges a single-turn sample by
    its one generation; a multi-turn episode is judged by all of its replies. An episode cut off
    for running out of turns or room with every reply finished (`truncated`) is not penalised:
    its replies did stop. None: off."""

    @model_validator(mode="after")
    def _check_ranges(self) -> RewardConfig:
        if self.clip_range is not None and not self.clip_range[0] < self.clip_range[1]:
            raise ValueError(
                f"clip_range {list(self.clip_range)} must be [low, high] with low below high"
            )
        coef = self.stop_properly_penalty_coef
        if coef is not None and coef > 1:
            raise ValueError(
                f"stop_properly_penalty_coef {coef} must be in [0, 1] (a factor on the reward) "
                "or negative (the reward itself)"
            )
        return self


def overlong_penalty(length: int, max_length: int, buffer_len: int, factor: float) -> float:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), OpenRLHF's
    `apply_overlong_penalty`: 0 up to `max_length - buffer_len` tokens, then falling linearly to
    `-factor` at `max_length`, and `-factor` beyond."""
    exceed = min(length - (max_length - buffer_len), buffer_len)
    return -exceed / buffer_len * factor if exceed > 0 else 0.0


def stop_properly_penalty(reward: float, coef: float) -> float:
    """ProRL's reward for a sample cut at the length limit (OpenRLHF's
    `apply_stop_properly_penalty`): scaled by `coef` in [0, 1], or `coef` itself when negative."""
    return coef if coef < 0 else reward * coef


def longest_reply(loss_mask: Sequence[int]) -> int:
    """The longest run of model tokens: a reply (replies with nothing between them, as after a
    text env's empty answer, count as one)."""
    longest = run = 0
    for bit in loss_mask:
        run = run + 1 if bit else 0
        longest = max(longest, run)
    return longest


def _stats(
    rule: ShapingRule, touched: Sequence[bool], before: Sequence[float], after: Sequence[float]
) -> ShapingStats:
    """How many samples `rule` applied to, and the mean size of the change to their value."""
    changes = [abs(b - a) for hit, a, b in zip(touched, before, after, strict=True) if hit]
    mean = sum(changes) / len(changes) if changes else 0.0
    return ShapingStats(rule=rule, samples=len(changes), change=mean)


@dataclass(frozen=True)
class RewardShaping:
    """The `reward.*` rules of a run; `max_reply_tokens` is the limit the overlong buffer ends
    at (`rollout.max_reply_tokens`)."""

    config: RewardConfig
    max_reply_tokens: int

    def rewards(self, trajectories: Sequence[Trajectory]) -> tuple[list[float], list[ShapingStats]]:
        """Each episode's reward after the length penalties (the overlong buffer, then the
        stop-properly penalty, in OpenRLHF's order), and what each rule that is on changed."""
        cfg = self.config
        rewards = [t.reward for t in trajectories]
        stats = []
        if cfg.overlong_buffer_len is not None:
            buffer, factor = cfg.overlong_buffer_len, cfg.overlong_penalty_factor
            lengths = [longest_reply(t.loss_mask) for t in trajectories]
            before = rewards
            rewards = [
                r + overlong_penalty(n, self.max_reply_tokens, buffer, factor)
                for r, n in zip(rewards, lengths, strict=True)
            ]
            into_buffer = [n > self.max_reply_tokens - buffer for n in lengths]
            stats.append(_stats("overlong", into_buffer, before, rewards))
        if cfg.stop_properly_penalty_coef is not None:
            coef = cfg.stop_properly_penalty_coef
            cut = ["length" in t.finish_reasons for t in trajectories]
            before = rewards
            rewards = [
                stop_properly_penalty(r, coef) if c else r
                for r, c in zip(rewards, cut, strict=True)
            ]
            stats.append(_stats("unstopped", cut, before, rewards))
        return rewards, stats

    def clip(self, values: torch.Tensor) -> tuple[torch.Tensor, list[ShapingStats]]:
        """Each sequence's reward after its group's baseline, clamped to `clip_range` (unchanged
        without one), and what the clamp changed."""
        if self.config.clip_range is None:
            return values, []
        low, high = self.config.clip_range
        clipped = values.clamp(min=low, max=high)
        outside = ((values < low) | (values > high)).tolist()
        return clipped, [_stats("clipped", outside, values.tolist(), clipped.tolist())]
