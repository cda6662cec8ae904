"""Advantage estimators, as OpenRLHF's `compute_advantages_and_returns` defines them.

Each sequence-level estimator maps a [groups, group_size] tensor of rewards (the
`n_samples_per_prompt` answers to one prompt per row) to advantages of the same shape;
`advantages` flattens in and out and whitens over the batch where OpenRLHF does (`reinforce`,
`reinforce_baseline`), and `gae` covers PPO with a critic (whitened by `whiten` too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

Estimator = Callable[[torch.Tensor, float], torch.Tensor]


def _centred(r: torch.Tensor) -> torch.Tensor:
    return r - r.mean(dim=1, keepdim=True)


def _group_norm(r: torch.Tensor, eps: float) -> torch.Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath): `(r - mean) / (std + eps)` within each group,
    std unbiased; OpenRLHF's `group_norm` (its epsilon is 1e-9, ours `eps`)."""
    # A group of identical rewards has std 0 and gets advantage 0, not 0/0.
    std = r.std(dim=1, keepdim=True) if r.shape[1] > 1 else torch.zeros_like(r[:, :1])
    return _centred(r) / (std + eps)


def _dr_grpo(r: torch.Tensor, eps: float) -> torch.Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): GRPO without the
    division by the group's std; OpenRLHF's `dr_grpo`."""
    return _centred(r)


def _rloo(r: torch.Tensor, eps: float) -> torch.Tensor:
    """RLOO (Ahmadian et al. 2024, "Back to Basics"): the reward minus the mean of the other
    samples of its group; OpenRLHF's `rloo`."""
    # r_i - mean_{j != i} r_j  ==  n / (n - 1) * (r_i - mean_j r_j).
    n = r.shape[1]
    if n < 2:
        raise ValueError("rloo needs n_samples_per_prompt >= 2 (the baseline leaves one out)")
    return _centred(r) * n / (n - 1)


def _reinforce(r: torch.Tensor, eps: float) -> torch.Tensor:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): the reward itself, which `advantages` then
    whitens over the whole batch; OpenRLHF's `reinforce` with the KL as a loss
    (`--algo.kl.use_loss`) or a KL coefficient of 0."""
    return r.clone()


def _reinforce_baseline(r: torch.Tensor, eps: float) -> torch.Tensor:
    """REINFORCE++-baseline (Hu 2025, arXiv:2501.03262): the reward minus its group's mean,
    which `advantages` then whitens over the whole batch; OpenRLHF's `reinforce_baseline` with
    the KL as a loss or a KL coefficient of 0."""
    return _centred(r)


ESTIMATORS: dict[str, Estimator] = {
    "group_norm": _group_norm,
    "dr_grpo": _dr_grpo,
    "rloo": _rloo,
    "reinforce": _reinforce,
    "reinforce_baseline": _reinforce_baseline,
}
"""Sequence-level estimators by name; `gae` (PPO with a critic) needs values: see `gae`."""

BATCH_WHITENED = frozenset({"reinforce", "reinforce_baseline"})
"""Estimators whose advantages OpenRLHF whitens over the batch's model tokens afterwards."""


def whiten(values: torch.Tensor, weights: torch.Tensor, *, std_norm: bool = True) -> torch.Tensor:
    """OpenRLHF's batch normalisation of advantages: `(x - mean) / std`, with the mean and the
    (biased) variance weighted by `weights` and the variance clamped at 1e-8.

    `weights` has the shape of `values`: each sequence's model-token count for per-sequence
    advantages (a sequence counts once per token, as its advantage does in the loss), or the
    loss mask for per-token ones. `std_norm=False` only subtracts the mean (OpenRLHF's
    `--algo.advantage.no_std_norm`). Zero where the weight is 0; a batch of zero weight gives
    zeros.
    """
    w = weights.to(torch.float64)
    x = values.to(torch.float64)
    total = w.sum()
    if total <= 0:
        return torch.zeros_like(values)
    mean = (x * w).sum() / total
    out = x - mean
    if std_norm:
        var = ((out**2) * w).sum() / total
        out = out * var.clamp(min=1e-8).rsqrt()
    return torch.where(w > 0, out, 0.0).to(values.dtype)


def sequence_values(
    rewards: torch.Tensor | Sequence[float],
    group_size: int,
    estimator: str = "group_norm",
    *,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Each sequence's reward after its group's baseline by `estimator` (the reward itself for
    `reinforce`), before any clip or batch whitening: the value OpenRLHF hands `compute_reward`.
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


def advantages(
    rewards: torch.Tensor | Sequence[float],
    group_size: int,
    estimator: str = "group_norm",
    *,
    token_counts: torch.Tensor | Sequence[int] | None = None,
    std_norm: bool = True,
    clip_range: tuple[float, float] | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Per-sequence advantages for rewards laid out as consecutive groups of `group_size`.

    `token_counts` are each sequence's model tokens: `reinforce` and `reinforce_baseline` are
    whitened over the batch's tokens, as OpenRLHF does (without them every sequence weighs the
    same). `std_norm=False` keeps only the subtraction of the batch mean. `clip_range` clamps
    each sequence's value after its group's baseline and before the whitening, where OpenRLHF's
    `--reward.clip_range` does. Returns a float tensor of the same length; an empty input gives
    an empty output.
    """
    adv = sequence_values(rewards, group_size, estimator, eps=eps)
    counts = torch.ones_like(adv) if token_counts is None else torch.as_tensor(token_counts)
    if counts.shape != adv.shape or bool((counts < 0).any()):
        raise ValueError(
            f"token_counts must give one count of model tokens (>= 0) per reward: got "
            f"{list(counts.shape)} for {adv.numel()} rewards"
        )
    if adv.numel() == 0:
        return adv
    if clip_range is not None:
        adv = adv.clamp(min=clip_range[0], max=clip_range[1])
    if estimator in BATCH_WHITENED:
        adv = whiten(adv, counts, std_norm=std_norm)
    return adv


def gae(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over the masked (model) tokens
    of each row: OpenRLHF's `gae` before its batch whitening (`whiten` with the mask).

    `token_rewards`, `values` and `mask` are [batch, tokens]; with the KL in the reward, the
    rewards are the episode's reward on its last model token minus `kl_coef` times each
    token's KL. Env tokens (mask 0) are skipped, so the next model token's value bootstraps
    across an env turn; OpenRLHF steps through them as tokens of reward 0 and value 0 instead,
    which differs only with several turns and `gamma * lam` below 1. Returns (advantages,
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
