"""Off-policy correction against the rollout engine's logprobs.

The learner's `old_logprobs` (the policy that is being improved, evaluated by the trainer)
and the engine's `rollout_logprobs` (what actually sampled the tokens) differ because of
staleness and numerics; the token ratio exp(old - rollout) re-weights the loss. `GapMeter`
measures that difference over a learner step, split by whether the learner's current policy
sampled the token, and what the correction did about it.
"""

from __future__ import annotations

from collections.abc import Callable
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
    clipped: torch.Tensor
    """[batch, tokens] bool: model tokens whose ratio was clamped."""
    masked: torch.Tensor
    """[batch, tokens] bool: model tokens given weight 0."""


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
    - `none`: no correction, weight 1 on every model token.

    All tensors are [batch, tokens]; a row with no model tokens gets all-zero weights.
    """
    if mode not in (*IMPORTANCE_MODES, "none"):
        raise ValueError(
            f"unknown importance mode {mode!r}; choose one of {(*IMPORTANCE_MODES, 'none')}"
        )
    if not 0 < low <= 1 <= high:
        raise ValueError(
            f"importance bounds must satisfy 0 < low <= 1 <= high, got [{low}, {high}]"
        )
    m = mask.to(old_logprobs.dtype)
    if mode == "none":
        nothing = torch.zeros_like(mask, dtype=torch.bool)
        return ImportanceWeights(m, 0.0, 0.0, nothing, nothing)
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
        clipped=clipped > 0,
        masked=(m - keep) > 0,
    )


class GapMeter:
    """The train/inference gap of one learner step, added up over its micro-batches.

    The gap of a model token is |learner old logprob - rollout logprob|: the learner's
    logprob of the token before the step against the engine's when it sampled it. A token is
    `current` when the policy version that sampled it is the learner's own (only numerics
    differ), `stale` when an older policy sampled it. `metrics()` gives:

    - `gap/mean`, `gap/max`: over every model token of the batch;
    - `gap/current_mean`, `gap/current_max`, `gap/stale_mean`, `gap/stale_max`: the same over
      current and stale tokens (each only when the batch has such tokens and knows versions);
    - `gap/stale_tokens`: the fraction of model tokens that are stale;
    - `is_clipped`, `is_masked`: the fraction of model tokens whose importance ratio was
      clamped (TIS, seq-mask-TIS) or which got weight 0 (ICEPOP, seq-mask-TIS);
    - `is_masked_sequences`: the fraction of sequences with model tokens that got weight 0 on
      every one of them (nothing of them is learned).
    """

    def __init__(self) -> None:
        self._sums = {"all": 0.0, "current": 0.0, "stale": 0.0}
        self._counts = {"all": 0, "current": 0, "stale": 0}
        self._maxes = {"all": 0.0, "current": 0.0, "stale": 0.0}
        self._versions_known = True
        self._clipped = self._masked = 0
        self._sequences = self._masked_sequences = 0

    def add(
        self,
        old_logprobs: torch.Tensor,
        rollout_logprobs: torch.Tensor,
        mask: torch.Tensor,
        correction: ImportanceWeights,
        current: torch.Tensor | None = None,
    ) -> None:
        """One micro-batch; `current` is [batch, tokens] bool, True where the learner's own
        policy version sampled the token (None: versions unknown, no split)."""
        model = mask > 0
        gap = (old_logprobs.detach() - rollout_logprobs).abs().float()
        kinds = {"all": model}
        if current is None:
            self._versions_known = False
        else:
            kinds |= {"current": model & current, "stale": model & ~current}
        for kind, where in kinds.items():
            picked = gap[where]
            if picked.numel():
                self._sums[kind] += float(picked.sum())
                self._counts[kind] += int(picked.numel())
                self._maxes[kind] = max(self._maxes[kind], float(picked.max()))
        self._clipped += int((correction.clipped & model).sum())
        self._masked += int((correction.masked & model).sum())
        has_tokens = model.any(dim=1)
        all_masked = ((correction.masked | ~model).all(dim=1)) & has_tokens
        self._sequences += int(has_tokens.sum())
        self._masked_sequences += int(all_masked.sum())

    def merge(self, reduce: Callable[[list[float], str], list[float]]) -> None:
        """Take in the other ranks' meters of a learner of several ranks, each of which
        measured its share of the batch: `reduce(values, op)` gives each value summed
        (`op="sum"`) or maxed (`op="max"`) over every rank."""
        kinds = ("all", "current", "stale")
        counts = [self._clipped, self._masked, self._sequences, self._masked_sequences]
        unknown = 0.0 if self._versions_known else 1.0
        summed = reduce(
            [*(self._sums[k] for k in kinds), *(self._counts[k] for k in kinds), *counts, unknown],
            "sum",
        )
        maxed = reduce([self._maxes[k] for k in kinds], "max")
        for i, kind in enumerate(kinds):
            self._sums[kind], self._counts[kind] = summed[i], int(summed[3 + i])
            self._maxes[kind] = maxed[i]
        self._clipped, self._masked, self._sequences, self._masked_sequences = (
            int(v) for v in summed[6:10]
        )
        self._versions_known = summed[10] == 0

    def metrics(self) -> dict[str, float]:
        tokens = max(self._counts["all"], 1)
        out = {
            "gap/mean": self._sums["all"] / tokens,
            "gap/max": self._maxes["all"],
            "is_clipped": self._clipped / tokens,
            "is_masked": self._masked / tokens,
            "is_masked_sequences": self._masked_sequences / max(self._sequences, 1),
        }
        if self._versions_known:
            out["gap/stale_tokens"] = self._counts["stale"] / tokens
            for kind in ("current", "stale"):
                if self._counts[kind]:
                    out[f"gap/{kind}_mean"] = self._sums[kind] / self._counts[kind]
                    out[f"gap/{kind}_max"] = self._maxes[kind]
        return out
