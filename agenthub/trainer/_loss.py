"""The clipped policy-gradient loss and KL estimators."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from agenthub.trainer._learner_config import Aggregation

KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

KL_ESTIMATORS: dict[str, KLFn] = {
    # log pi - log pi_ref, per token (Schulman's k1, k2, k3)
    "k1": lambda logp, ref: logp - ref,
    "k2": lambda logp, ref: 0.5 * (logp - ref) ** 2,
    "k3": lambda logp, ref: torch.expm1(ref - logp) - (ref - logp),
}


def kl_divergence(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str = "k3"
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimates, 0 where mask is 0."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(
            f"unknown KL estimator {estimator!r}; choose one of {sorted(KL_ESTIMATORS)}"
        )
    return KL_ESTIMATORS[estimator](logprobs, ref_logprobs) * mask.to(logprobs.dtype)


@dataclass(frozen=True)
class PolicyLoss:
    """The loss and what it did, as 0-d tensors on the loss's device (reading one as a number
    waits for the device: the learner does so once per step)."""

    loss: torch.Tensor
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    weights: torch.Tensor | None = None,
    aggregation: Aggregation = "token-mean",
    max_tokens: int | None = None,
) -> PolicyLoss:
    """PPO-clip with separate low/high epsilon, per token, times off-policy `weights`.

    `advantages` is [batch] (one per sequence) or [batch, tokens]. Aggregations:
    `token-mean` averages over all model tokens of the batch; `seq-mean-token-mean` averages
    per sequence, then over sequences; `seq-mean-token-sum-norm` (Dr. GRPO) sums per sequence
    and divides by `max_tokens` (default: the padded length), then averages over sequences.
    """
    m = mask.to(logprobs.dtype)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    ratio = (logprobs - old_logprobs).exp()
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - eps_low, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    if weights is not None:
        per_token = per_token * weights
    per_token = per_token * m
    if aggregation == "token-mean":
        loss = per_token.sum() / m.sum().clamp_min(1)
    elif aggregation == "seq-mean-token-mean":
        loss = (per_token.sum(dim=1) / m.sum(dim=1).clamp_min(1)).mean()
    elif aggregation == "seq-mean-token-sum-norm":
        loss = (per_token.sum(dim=1) / (max_tokens or per_token.shape[1])).mean()
    else:
        raise ValueError(f"unknown aggregation {aggregation!r}")
    with torch.no_grad():
        total = m.sum().clamp_min(1)
        clip_fraction = ((clipped > unclipped).to(m.dtype) * m).sum() / total
        approx_kl = (0.5 * (logprobs - old_logprobs) ** 2 * m).sum() / total
    return PolicyLoss(loss=loss, clip_fraction=clip_fraction, approx_kl=approx_kl)


class KLController:
    """The KL coefficient of each learner step: fixed, or adapted towards a target KL.

    With a `target`, the adaptive controller of Ziegler et al. 2019 ("Fine-Tuning Language
    Models from Human Preferences", section 2.2) as OpenRLHF's `kl_controller.py` has it:
    after a step whose mean KL was `kl` over `n_samples` sequences, the coefficient is
    multiplied by 1 + clip(kl / target - 1, -0.2, 0.2) * n_samples / horizon, so it grows
    while the policy drifts further from the reference than the target and shrinks while it
    stays closer. Without a target the coefficient stays `init_coef` (OpenRLHF's
    `FixedKLController`).
    """

    def __init__(self, init_coef: float, target: float | None = None, horizon: int = 10000):
        if target is not None and target <= 0:
            raise ValueError(f"the KL target must be positive, got {target}")
        if horizon < 1:
            raise ValueError(f"the KL horizon must be at least 1, got {horizon}")
        self.value = init_coef
        self.target = target
        self.horizon = horizon

    def update(self, kl: float, n_samples: int) -> None:
        """Adapt the coefficient after a step whose mean KL was `kl` over `n_samples`."""
        if self.target is None:
            return
        error = min(max(kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_samples / self.horizon
