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
    """Per-token weights (0 where masked or rejected) and which tokens were touched."""

    weights: torch.Tensor
    clipped: torch.Tensor
    """[batch, tokens] bool: model tokens whose ratio was clamped."""
    masked: torch.Tensor
    """[batch, tokens] bool: model tokens given weight 0."""
    model_tokens: torch.Tensor
    """0-d: how many model tokens there are (at least 1)."""

    @property
    def clipped_fraction(self) -> float:
        """Fraction of model tokens whose ratio was clamped into [low, high] (waits for the
        device)."""
        return float(self.clipped.sum() / self.model_tokens)

    @property
    def masked_fraction(self) -> float:
        """Fraction of model tokens given weight 0 by the correction (waits for the device)."""
        return float(self.masked.sum() / self.model_tokens)


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
    total = m.sum().clamp_min(1)
    if mode == "none":
        nothing = torch.zeros_like(mask, dtype=torch.bool)
        return ImportanceWeights(m, nothing, nothing, total)
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
    clipped = outside.to(m.dtype) * keep if mode != "icepop" else torch.zeros_like(m)
    return ImportanceWeights(
        weights=weights.detach(), clipped=clipped > 0, masked=(m - keep) > 0, model_tokens=total
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
        # Kept on the device of the micro-batches, as sums and maxima in the order of _SUMS
        # and _KINDS, and read once per step (`merge` or `metrics`).
        self._sums: torch.Tensor | None = None
        self._maxes: torch.Tensor | None = None
        self._versions_known = True
        self._read: tuple[list[float], list[float]] | None = None

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
        gap = (old_logprobs.detach() - rollout_logprobs).abs().to(torch.float64)
        if current is None:
            self._versions_known = False
            current = torch.zeros_like(model)
        kinds = [model, model & current, model & ~current]
        has_tokens = model.any(dim=1)
        all_masked = ((correction.masked | ~model).all(dim=1)) & has_tokens
        sums = [
            *(torch.where(where, gap, 0).sum() for where in kinds),
            *(where.sum() for where in kinds),
            (correction.clipped & model).sum(),
            (correction.masked & model).sum(),
            has_tokens.sum(),
            all_masked.sum(),
        ]
        added = torch.stack([v.to(torch.float64) for v in sums])
        maxes = torch.stack([torch.where(where, gap, 0).max() for where in kinds])
        if self._sums is None or self._maxes is None:
            self._sums, self._maxes = added, maxes
        else:
            self._sums, self._maxes = self._sums + added, torch.maximum(self._maxes, maxes)
        self._read = None

    def _values(self) -> tuple[list[float], list[float]]:
        """The sums and maxima as numbers: the one wait for the device."""
        if self._read is None:
            if self._sums is None or self._maxes is None:
                self._read = [0.0] * len(_SUMS), [0.0] * len(_KINDS)
            else:
                self._read = self._sums.tolist(), self._maxes.tolist()
        return self._read

    def merge(self, reduce: Callable[[list[float], str], list[float]]) -> None:
        """Take in the other ranks' meters of a learner of several ranks, each of which
        measured its share of the batch: `reduce(values, op)` gives each value summed
        (`op="sum"`) or maxed (`op="max"`) over every rank."""
        sums, maxes = self._values()
        summed = reduce([*sums, 0.0 if self._versions_known else 1.0], "sum")
        self._read = summed[: len(_SUMS)], reduce(maxes, "max")
        self._versions_known = summed[-1] == 0

    def metrics(self) -> dict[str, float]:
        sums, maxes = self._values()
        at = dict(zip(_SUMS, sums, strict=True))
        largest = dict(zip(_KINDS, maxes, strict=True))
        tokens = max(at["count/all"], 1.0)
        out = {
            "gap/mean": at["sum/all"] / tokens,
            "gap/max": largest["all"],
            "is_clipped": at["clipped"] / tokens,
            "is_masked": at["masked"] / tokens,
            "is_masked_sequences": at["masked_sequences"] / max(at["sequences"], 1.0),
        }
        if self._versions_known:
            out["gap/stale_tokens"] = at["count/stale"] / tokens
            for kind in ("current", "stale"):
                if at[f"count/{kind}"]:
                    out[f"gap/{kind}_mean"] = at[f"sum/{kind}"] / at[f"count/{kind}"]
                    out[f"gap/{kind}_max"] = largest[kind]
        return out


_KINDS = ("all", "current", "stale")
_SUMS = (
    *(f"sum/{k}" for k in _KINDS),
    *(f"count/{k}" for k in _KINDS),
    "clipped",
    "masked",
    "sequences",
    "masked_sequences",
)
