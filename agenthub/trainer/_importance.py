"""Off-policy correction against the rollout engine's logprobs.

The learner's `old_logprobs` (the policy that is being improved, evaluated by the trainer)
and the engine's `rollout_logprobs` (what actually sampled the tokens) differ because of
staleness and numerics; the token ratio exp(old - rollout) re-weights the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IMPORTANCE_MODES = ("tis", "icepop", "seq-mask-tis")
_MAX_LOG_RATIO = 20.0  # exp(20) ~ 5e8: beyond any threshold, and far from float overflow


@dataclass(frozen=True)
class ImportanceWeights:
    """Per-token weights (0 where masked or rejected) and how many tokens were touched."""

    weights: torch.Tensor
    clipped_fraction: float
    """Fraction of model tokens whose ratio was clamped into [low, high]."""
    masked_fraction: float
    """Fraction of model tokens given weight 0 by the correction."""


def importance_weights(
    old_logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "tis",
    low: float = 0.5,
    high: float = 5.0,
) -> ImportanceWeights:
    """Token weights for the policy loss.

    - `tis`: the token ratio clamped to [low, high] (truncated importance sampling).
    - `icepop`: the token ratio where it lies in [low, high], 0 elsewhere.
    - `seq-mask-tis`: sequences whose geometric-mean ratio (exp of the mean log ratio over
      their model tokens) lies outside [low, high] get weight 0 throughout; the others get
      `tis` weights.

    All tensors are [batch, tokens]; a row with no model tokens gets all-zero weights.
    """
    if mode not in IMPORTANCE_MODES:
        raise ValueError(f"unknown importance mode {mode!r}; choose one of {IMPORTANCE_MODES}")
    if not 0 < low <= 1 <= high:
        raise ValueError(
            f"importance bounds must satisfy 0 < low <= 1 <= high, got [{low}, {high}]"
        )
    m = mask.to(old_logprobs.dtype)
    log_ratio = ((old_logprobs - rollout_logprobs) * m).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = log_ratio.exp()
    outside = ((ratio < low) | (ratio > high)) & (m > 0)
    keep = m.clone()
    if mode == "icepop":
        keep = keep * (~outside).to(m.dtype)
    elif mode == "seq-mask-tis":
        tokens = m.sum(dim=1)
        geo = (log_ratio.sum(dim=1) / tokens.clamp_min(1)).exp()
        seq_ok = ((geo >= low) & (geo <= high)).to(m.dtype)
        keep = keep * seq_ok[:, None]
    weights = ratio.clamp(low, high) * keep
    total = m.sum().clamp_min(1)
    clipped = outside.to(m.dtype) * keep if mode != "icepop" else torch.zeros_like(m)
    return ImportanceWeights(
        weights=weights.detach(),
        clipped_fraction=float(clipped.sum() / total),
        masked_fraction=float((m - keep).sum() / total),
    )
