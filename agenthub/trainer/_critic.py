"""The critic of PPO with a value model (`algorithm.estimator = "gae"`).

The critic is the policy's architecture with a one-output head per token
(`AutoModelForTokenClassification`, body initialised from the policy's weights), trained under
its own DeepSpeed engine. Its value at token t estimates the return from the state before
token t, so it is read from the hidden state of token t - 1, the same alignment as the
policy's logprobs. The episode's reward sits on its last model token; `gae` skips the
environment's tokens, so values bootstrap across env turns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from agenthub.trainer._advantages import gae
from agenthub.trainer._attention import no_masks, packed_inputs, use_packed_attention
from agenthub.trainer._batch import MicroBatch, TrainBatch
from agenthub.trainer._learner_config import CriticConfig
from agenthub.trainer._logprobs import train_without_dropout
from agenthub.trainer._ranks import all_gather, all_reduce, world_size

__all__ = ["Critic", "CriticConfig"]


@dataclass(frozen=True)
class ValueTargets:
    """What one micro-batch's critic update needs: the returns and the values they came from."""

    returns: torch.Tensor  # [B, T], 0 where the loss mask is 0
    values: torch.Tensor  # [B, T], 0 where the loss mask is 0


def final_token_rewards(batch: TrainBatch) -> torch.Tensor:
    """[B, T]: each episode's reward on its last model token, 0 elsewhere."""
    if batch.rewards is None:
        raise ValueError("a learner with a critic needs the batch's episode rewards")
    mask = batch.loss_mask
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask > 0, positions, -1).max(dim=1).values
    out = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    has_tokens = last >= 0
    rows = torch.arange(len(batch), device=mask.device)[has_tokens]
    out[rows, last[has_tokens]] = batch.rewards[has_tokens].to(out.dtype)
    return out


class Critic:
    """A value model under its own DeepSpeed engine: `prepare` turns micro-batches of episode
    rewards into per-token GAE advantages, `fit` regresses the values on the returns."""

    def __init__(
        self,
        model_path: str | Path,
        config: CriticConfig,
        engine: Callable[[torch.nn.Module, float], Any],
        dtype: torch.dtype,
    ) -> None:
        """`engine(module, lr)` gives the engine that trains `module` (the learner's kind)."""
        from transformers import AutoModelForTokenClassification

        self.config = config
        model = AutoModelForTokenClassification.from_pretrained(
            model_path, num_labels=1, dtype=dtype
        )
        use_packed_attention(train_without_dropout(model))
        self._no_masks = no_masks(model)
        self.engine = engine(model, config.lr)

    def values(self, micro: MicroBatch) -> torch.Tensor:
        """[B, T]: the value of the state before each model token (0 on other tokens), from
        the micro-batch's sequences packed into one row."""
        packed = micro.packed
        out = self.engine(**packed_inputs(packed), **self._no_masks)
        scores = packed.unpack(out.logits[0, :, 0].float())
        values = torch.nn.functional.pad(scores[:, :-1], (1, 0))
        return values * micro.batch.loss_mask.to(values.dtype)

    def prepare(self, plan: list[MicroBatch]) -> tuple[list[MicroBatch], list[ValueTargets]]:
        """The micro-batches with per-token GAE advantages, and each one's value targets."""
        cfg = self.config
        advantages, targets = [], []
        with torch.no_grad():
            for micro in plan:
                values = self.values(micro)
                adv, returns = gae(
                    final_token_rewards(micro.batch),
                    values,
                    micro.batch.loss_mask,
                    gamma=cfg.gamma,
                    lam=cfg.lam,
                )
                advantages.append(adv)
                targets.append(ValueTargets(returns=returns, values=values))
        if cfg.whiten:
            masks = [m.batch.loss_mask.bool() for m in plan]
            # Whitened over the whole batch: every rank's tokens.
            flat = all_gather(torch.cat([a[m] for a, m in zip(advantages, masks, strict=True)]))
            if flat.numel() > 1:
                mean, std = flat.mean(), flat.std()
                advantages = [
                    (a - mean) / (std + 1e-6) * m for a, m in zip(advantages, masks, strict=True)
                ]
        prepared = [
            replace(m, batch=replace(m.batch, advantages=a))
            for m, a in zip(plan, advantages, strict=True)
        ]
        return prepared, targets

    def fit(
        self, plan: list[MicroBatch], targets: list[ValueTargets], total_tokens: float
    ) -> dict[str, float]:
        """One optimiser step of the clipped value loss over all micro-batches, a mean over the
        `total_tokens` model tokens of the whole batch (of which a learner of several ranks
        holds a share). The sums stay on the device until the step ends."""
        ranks = world_size()
        sums = []
        for n, (micro, target) in enumerate(zip(plan, targets, strict=True)):
            self.engine.set_gradient_accumulation_boundary(n == len(plan) - 1)
            mask = micro.batch.loss_mask.to(torch.float32)
            values = self.values(micro)
            errors = (values - target.returns) ** 2
            if self.config.value_clip > 0:
                clip = self.config.value_clip
                kept = target.values + (values - target.values).clamp(-clip, clip)
                errors = torch.maximum(errors, (kept - target.returns) ** 2)
            loss = 0.5 * (errors * mask).sum() / max(total_tokens, 1.0)
            # DeepSpeed averages the ranks' gradients: times the ranks, they add up instead.
            self.engine.backward(loss * ranks)
            sums.append(torch.stack([loss.detach(), (values.detach() * mask).sum()]))
        self.engine.step()
        loss_sum, value_sum = all_reduce(torch.stack(sums).sum(dim=0).tolist(), self.engine.device)
        return {
            "critic/value_loss": loss_sum,
            "critic/value_mean": value_sum / max(total_tokens, 1.0),
        }

    def save_checkpoint(self, directory: Path) -> None:
        self.engine.save_checkpoint(str(directory), tag="critic")

    def load_checkpoint(self, directory: Path) -> None:
        path, _ = self.engine.load_checkpoint(str(directory), tag="critic")
        if path is None:
            raise FileNotFoundError(f"no critic checkpoint in {directory}")
