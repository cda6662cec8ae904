"""Reward shaping before advantages, as OpenRLHF's `--reward.*` settings do it: DAPO's overlong
buffer and ProRL's stop-properly penalty on each episode's reward, and the clip of each
sequence's reward after its group's baseline (see `RewardConfig` for how "length" and
"stopped properly" map onto multi-turn episodes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agenthub.agents import Trajectory
from agenthub.trainer._config import RewardConfig
from agenthub.trainer._metrics import ShapingRule, ShapingStats

__all__ = ["RewardShaping", "longest_reply", "overlong_penalty", "stop_properly_penalty"]


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
