"""The DeepSpeed learner: one policy-gradient step per batch, weights out for the engines."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from agenthub.trainer._batch import TrainBatch, token_logprobs
from agenthub.trainer._importance import importance_weights
from agenthub.trainer._loss import Aggregation, kl_divergence, policy_loss


class LearnerConfig(BaseModel):
    """How the learner optimises. Every field has a default that trains the embedded model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    zero_stage: Literal[0, 1, 2, 3] = 2
    """DeepSpeed ZeRO stage: 0 plain data parallel, 1-3 shard optimizer, gradients, weights."""
    lr: float = Field(1e-5, gt=0)
    """AdamW learning rate."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    grad_clip: float = Field(1.0, gt=0)
    """Clip the global gradient norm to this value."""
    micro_batch_size: int = Field(8, ge=1)
    """Sequences per forward/backward; a batch is split into micro-batches (accumulation)."""
    eps_low: float = Field(0.2, ge=0)
    """PPO clip: the ratio is kept above 1 - eps_low for negative advantages."""
    eps_high: float = Field(0.28, ge=0)
    """PPO clip: the ratio is kept below 1 + eps_high for positive advantages (clip-higher)."""
    importance_mode: Literal["tis", "icepop", "seq-mask-tis", "none"] = "tis"
    """Off-policy correction against the rollout engine's logprobs."""
    importance_low: float = Field(0.5, gt=0)
    """Lower bound of the token (or sequence) importance ratio."""
    importance_high: float = Field(5.0, ge=1)
    """Upper bound of the token (or sequence) importance ratio."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the KL term against the reference model (0: no reference model is loaded)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimator."""
    aggregation: Aggregation = "token-mean"
    """How per-token losses become the batch loss."""
    bf16: bool = False
    """Train in bfloat16 (on hardware that has it); fp32 otherwise."""


def _init_single_process_distributed() -> None:
    import deepspeed

    if not torch.distributed.is_initialized():
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("LOCAL_RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    deepspeed.init_distributed(dist_backend=backend)


class Learner:
    """Owns the policy under a DeepSpeed engine and takes one optimisation step per batch.

    `step` computes the learner's own logprobs of the batch before updating (`old`), weights
    tokens by the off-policy correction between those and the rollout engine's logprobs,
    applies PPO-clip (and a KL term when `kl_coef` > 0), accumulates over micro-batches and
    steps once. `state_dict` returns full weights (gathered under ZeRO-3) for the engines.
    """

    def __init__(self, model_path: str | Path, config: LearnerConfig | None = None) -> None:
        import deepspeed
        from transformers import AutoModelForCausalLM

        self.config = config or LearnerConfig()
        _init_single_process_distributed()
        dtype = torch.bfloat16 if self.config.bf16 else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
        self.reference: Any = None
        if self.config.kl_coef > 0:
            self.reference = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
            self.reference.eval().requires_grad_(False)
        ds_config: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": self.config.micro_batch_size,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": self.config.grad_clip,
            "optimizer": {
                "type": "AdamW",
                "params": {"lr": self.config.lr, "weight_decay": self.config.weight_decay},
            },
            "zero_optimization": {"stage": self.config.zero_stage},
            "bf16": {"enabled": self.config.bf16},
            "steps_per_print": 2**31 - 1,
        }
        self.engine, *_ = deepspeed.initialize(
            model=model, config=ds_config, model_parameters=model.parameters()
        )
        self.steps = 0

    def _logprobs(self, module: Any, batch: TrainBatch) -> torch.Tensor:
        logits = module(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        return token_logprobs(logits, batch.input_ids)

    def step(self, batch: TrainBatch) -> dict[str, float]:
        """One optimisation step on `batch`; returns metrics for logging."""
        cfg = self.config
        chunks = [
            batch.slice(i, i + cfg.micro_batch_size)
            for i in range(0, len(batch), cfg.micro_batch_size)
        ]
        self.engine.set_gradient_accumulation_boundary(False)
        totals: dict[str, float] = {}
        for n, chunk in enumerate(chunks):
            mask = chunk.loss_mask
            with torch.no_grad():
                old = self._logprobs(self.engine.module, chunk)
            if cfg.importance_mode == "none":
                weights, clipped, masked = mask.float(), 0.0, 0.0
            else:
                iw = importance_weights(
                    old,
                    chunk.rollout_logprobs,
                    mask,
                    cfg.importance_mode,
                    cfg.importance_low,
                    cfg.importance_high,
                )
                weights, clipped, masked = iw.weights, iw.clipped_fraction, iw.masked_fraction
            new = self._logprobs(self.engine, chunk)
            out = policy_loss(
                new,
                old,
                chunk.advantages,
                mask,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                weights=weights,
                aggregation=cfg.aggregation,
            )
            loss = out.loss
            metrics = {
                "clip_fraction": out.clip_fraction,
                "is_clipped": clipped,
                "is_masked": masked,
            }
            if self.reference is not None:
                with torch.no_grad():
                    ref = self._logprobs(self.reference, chunk)
                kl = kl_divergence(new, ref, mask, cfg.kl_estimator)
                kl_mean = kl.sum() / mask.sum().clamp_min(1)
                loss = loss + cfg.kl_coef * kl_mean
                metrics["kl"] = kl_mean.item()
            # DeepSpeed steps the optimiser only at the boundary: the last micro-batch.
            self.engine.set_gradient_accumulation_boundary(n == len(chunks) - 1)
            self.engine.backward(loss * len(chunk) / len(batch))
            metrics["loss"] = loss.item()
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + value * len(chunk) / len(batch)
        self.engine.step()
        self.steps += 1
        norm = self.engine.get_global_grad_norm()
        totals["grad_norm"] = float(norm) if norm is not None else 0.0
        return totals

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full weights on CPU, gathered from all ranks under ZeRO-3."""
        module = self.engine.module
        if self.config.zero_stage == 3:
            from deepspeed.runtime.zero import GatheredParameters

            with GatheredParameters(list(module.parameters())):
                return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}

    def save_checkpoint(self, directory: str | Path, tag: str) -> None:
        self.engine.save_checkpoint(str(directory), tag=tag, client_state={"steps": self.steps})

    def load_checkpoint(self, directory: str | Path, tag: str | None = None) -> None:
        path, client = self.engine.load_checkpoint(str(directory), tag=tag)
        if path is None:
            raise FileNotFoundError(f"no learner checkpoint in {directory}")
        self.steps = int(client["steps"])
