"""Advantage estimators. Each sequence-level estimator maps a [groups, group_size] tensor of
rewards (the `n_samples_per_prompt` answers to one prompt per row) to advantages of the same
shape; `advantages` flattens in and out and `gae` covers PPO with a critic."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

Estimator = Callable[[torch.Tensor, float], torch.Tensor]


def _centred(r: torch.Tensor) -> torch.Tensor:
    return r - r.mean(dim=1, keepdim=True)


def _group_norm(r: torch.Tensor, eps: float) -> torch.Tensor:
    # GRPO. A group of identical rewards has std 0 and gets advantage 0, not 0/0.
    std = r.std(dim=1, keepdim=True) if r.shape[1] > 1 else torch.zeros_like(r[:, :1])
    return _centred(r) / (std + eps)


def _rloo(r: torch.Tensor, eps: float) -> torch.Tensor:
    # Leave-one-out baseline: r_i - mean_{j != i} r_j  ==  n / (n - 1) * (r_i - mean_j r_j).
    n = r.shape[1]
    if n < 2:
        raise ValueError("rloo needs n_samples_per_prompt >= 2 (the baseline leaves one out)")
    return _centred(r) * n / (n - 1)


ESTIMATORS: dict[str, Estimator] = {
    "group_norm": _group_norm,
    "dr_grpo": lambda r, eps: _centred(r),  # GRPO without the std division (Dr. GRPO)
    "rloo": _rloo,
    "reinforce": lambda r, eps: r.clone(),
    "reinforce_baseline": lambda r, eps: _centred(r),
}
"""Sequence-level estimators by name; `gae` (PPO with a critic) needs values: see `gae`."""


def advantages(
    rewards: torch.Tensor | Sequence[float],
    group_size: int,
    estimator: str = "group_norm",
    *,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Per-sequence advantages for rewards laid out as consecutive groups of `group_size`.

    Returns a float tensor of the same length; an empty input gives an empty output.
    """
    if estimator == "gae":
        raise ValueError("gae needs per-token values from a critic: call agenthub.trainer.gae")
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {sorted(ESTIMATORS)}")
    r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
    if group_size < 1 or r.numel() % group_size:
        raise ValueError(
            f"{r.numel()} rewards do not split into groups of {group_size}; each prompt's "
            "samples must stay together"
        )
    if r.numel() == 0:
        return r
    return ESTIMATORS[estimator](r.view(-1, group_size), eps).flatten()


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked (model) tokens of each row.

    `token_rewards`, `values` and `mask` are [batch, tokens]; env tokens (mask 0) are skipped,
    so the next model token's value bootstraps across an env turn. Returns (advantages,
    returns), zero where mask is 0.
    """
    mask_f = mask.to(token_rewards.dtype)
    adv = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    next_value = torch.zeros_like(running)
    for t in reversed(range(token_rewards.shape[1])):
        m = mask_f[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        running = torch.where(m > 0, delta + gamma * lam * running, running)
        adv[:, t] = running * m
        next_value = torch.where(m > 0, values[:, t], next_value)
    return adv, (adv + values) * mask_f


def filter_groups(
    scores: torch.Tensor | Sequence[float],
    group_size: int,
    low: float = -math.inf,
    high: float = math.inf,
) -> torch.Tensor:
    """Dynamic filtering: a boolean per sample, True for groups worth training on.

    A group is kept when its scores are not all equal (equal scores give zero advantage, so
    no signal) and its mean score lies within [low, high] (unbounded unless given).
    """
    s = torch.as_tensor(scores, dtype=torch.float32).view(-1, group_size)
    mean = s.mean(dim=1)
    varied = (s.max(dim=1).values - s.min(dim=1).values) > 0
    keep = varied & (mean >= low) & (mean <= high)
    return keep.repeat_interleave(group_size)
