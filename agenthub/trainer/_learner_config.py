"""The learner's and the critic's settings, apart from the code that uses them: the run's
configuration (and every process that reads it, the driver's and the actors' that never train)
imports them without importing torch."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agenthub.trainer._section import ConfigSection

__all__ = ["Aggregation", "CriticConfig", "LearnerConfig"]

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
"""How per-token losses become the batch loss."""


class CriticConfig(ConfigSection):
    """The value model and generalised advantage estimation of PPO with a critic."""

    lr: float = Field(1e-4, gt=0)
    """AdamW learning rate of the critic."""
    gamma: float = Field(1.0, ge=0, le=1)
    """Discount per model token."""
    lam: float = Field(0.95, ge=0, le=1)
    """GAE's lambda: 0 is one-step TD, 1 is the Monte Carlo return minus the value."""
    value_clip: float = Field(0.2, ge=0)
    """PPO's clipped value loss: a new value moves at most this far from the value the
    advantages were computed with before the loss stops pulling it (0: no clipping)."""
    whiten: bool = True
    """Normalise the batch's advantages to mean 0 and standard deviation 1 over model tokens."""


class LearnerConfig(ConfigSection):
    """How the learner optimises. Every field has a default that trains the embedded model."""

    zero_stage: Literal[0, 1, 2, 3] = 2
    """DeepSpeed ZeRO stage: 0 plain data parallel, 1-3 shard optimizer, gradients, weights."""
    lr: float = Field(1e-5, gt=0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    grad_clip: float = Field(1.0, gt=0)
    """Clip the global gradient norm to this value."""
    micro_batch_size: int = Field(8, ge=1)
    """Sequences per forward/backward; a batch is split into micro-batches (accumulation).
    Unused when `max_tokens_per_micro_batch` is set."""
    max_tokens_per_micro_batch: int | None = Field(None, ge=1)
    """Micro-batches by tokens instead: sequences are packed first-fit decreasing into
    micro-batches of at most this many tokens (a longer sequence gets one of its own). Either
    way a micro-batch's sequences go through the model packed end to end, with no compute on
    padding: on a GPU, set this to what fits (e.g. 4096-16384 for a 0.5B model)."""
    logprob_chunk_tokens: int = Field(1024, ge=1)
    """Tokens whose output-layer logits (tokens x vocabulary, fp32) exist at once when the
    learner computes logprobs; never the whole micro-batch's."""
    gradient_checkpointing: bool = False
    """Keep only each layer's input for the backward pass and recompute the rest: much less
    activation memory for long trajectories, for about a third more compute."""
    epochs: int = Field(1, ge=1)
    """Optimiser steps per batch; PPO-clip only matters from the second on."""
    eps_low: float = Field(0.2, ge=0)
    """PPO clip: the ratio is kept above 1 - eps_low for negative advantages."""
    eps_high: float = Field(0.28, ge=0)
    """PPO clip: the ratio is kept below 1 + eps_high for positive advantages (clip-higher)."""
    importance_mode: Literal["tis", "icepop", "seq-mask-tis", "none"] = "tis"
    """Off-policy correction against the rollout engine's logprobs."""
    importance_low: float = Field(0.5, gt=0, le=1)
    """Lower bound of the token (or sequence) importance ratio (at most 1: an on-policy token
    has ratio 1)."""
    importance_high: float = Field(5.0, ge=1)
    """Upper bound of the token (or sequence) importance ratio."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL term against the reference model (0: no reference model is loaded);
    with `kl_target`, the starting weight (OpenRLHF's `init_kl_coef`)."""
    kl_target: float | None = Field(None, gt=0)
    """Adapt the KL weight each step towards this mean KL per token (Ziegler et al. 2019, as
    OpenRLHF's `--kl_target`); None keeps `kl_coef` fixed. The weight in use is logged as
    `learner/kl_coef` and saved with each checkpoint."""
    kl_horizon: int = Field(10000, ge=1)
    """With `kl_target`: how many sampled sequences the weight takes to move by a factor of
    about e^0.2 while the KL stays off target (OpenRLHF's `--kl_horizon`)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimator."""
    kl_mode: Literal["loss", "reward"] = "loss"
    """The KL against the reference as a loss term, or as a per-token reward penalty."""
    aggregation: Aggregation = "token-mean"
    """How per-token losses become the batch loss."""
    bf16: bool | None = None
    """Train in bfloat16, the optimizer keeping fp32 master weights. None: bfloat16 on a GPU
    that has it, fp32 on CPU (where the embedded default's figures were measured; a CPU with
    bfloat16 instructions may take a step faster with `true`)."""
    critic: CriticConfig | None = None
    """PPO with a critic: a value model trained beside the policy, whose per-token GAE
    advantages replace the batch's sequence advantages (set by `algorithm.estimator=gae`)."""
