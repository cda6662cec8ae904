"""What the learner benchmarks share: agent-shaped batches, the update written by hand that the
learner is measured against, and the arithmetic of a step (run as `python benchmarks/NAME.py`,
which puts this folder on the path)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agenthub.trainer import TrainBatch, importance_weights, policy_loss, token_logprobs

Sequences = tuple[list[list[int]], list[list[int]], list[list[float]], list[float]]


def agent_sequences(
    count: int, median: int, longest: int, vocab: int, *, prompt: int = 256, seed: int = 0
) -> Sequences:
    """`count` trajectories whose lengths follow a lognormal (median `median`, sigma 0.6,
    clipped to [prompt / 2, longest]): a prompt, then model turns of ~150 tokens each followed
    by ~40 env tokens. Token ids, loss masks, rollout logprobs, advantages."""
    rng = random.Random(seed)
    tokens, masks, rollout, advantages = [], [], [], []
    for _ in range(count):
        n = int(min(max(rng.lognormvariate(math.log(median), 0.6), prompt // 2), longest))
        head = min(prompt, n // 4)
        mask = [0] * head
        while len(mask) < n:
            mask += [1] * rng.randint(80, 220) + [0] * rng.randint(20, 60)
        mask = mask[:n]
        tokens.append([rng.randrange(3, vocab) for _ in range(n)])
        masks.append(mask)
        rollout.append([-rng.uniform(0.5, 2.5) if m else 0.0 for m in mask])
        advantages.append(rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 1.0))
    return tokens, masks, rollout, advantages


def equal_sequences(count: int, prompt: int, response: int, vocab: int) -> Sequences:
    """`count` trajectories of `prompt` prompt tokens and `response` model tokens."""
    rng = random.Random(1)
    n = prompt + response
    tokens = [[rng.randrange(3, vocab) for _ in range(n)] for _ in range(count)]
    masks = [[0] * prompt + [1] * response for _ in range(count)]
    rollout = [[0.0] * prompt + [-1.0] * response for _ in range(count)]
    advantages = [rng.choice([-1.0, 1.0]) for _ in range(count)]
    return tokens, masks, rollout, advantages


def collate(seqs: Sequences) -> TrainBatch:
    return TrainBatch.collate(*seqs)


def useful_tokens(seqs: Sequences) -> int:
    return sum(len(t) for t in seqs[0])


def step_flops(config: Any, seqs: Sequences) -> float:
    """Model FLOPs of one training step over the real tokens (forward and backward): 6 per
    weight of every matrix a token passes (the output layer's included) and causal attention,
    6 x layers x hidden x L^2 for a sequence of L tokens. The same count for the learner and
    the hand-written loop, so their MFU differ exactly as their useful tokens/s do."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    head_dim = getattr(config, "head_dim", None) or hidden // config.num_attention_heads
    q = config.num_attention_heads * head_dim
    kv = config.num_key_value_heads * head_dim
    per_layer = hidden * (q + 2 * kv) + q * hidden + 3 * hidden * config.intermediate_size
    matrices = layers * per_layer + hidden * config.vocab_size
    lengths = [len(t) for t in seqs[0]]
    return sum(6.0 * matrices * n + 6.0 * layers * q * n * n for n in lengths)


class HandLoop:
    """The same update written by hand: micro-batches of `micro` sequences in the batch's
    order, each padded to its longest; the full [tokens x vocabulary] fp32 `log_softmax`; the
    learner's own importance weights and PPO-clip loss (token-mean over the batch); in bf16,
    fp32 master weights stepped by torch's (fused on CUDA) AdamW and copied back."""

    def __init__(self, model_path: Path, micro: int, device: str, bf16: bool) -> None:
        from transformers import AutoModelForCausalLM

        dtype = torch.bfloat16 if bf16 else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to(device)
        self.model.train()
        self.micro, self.device, self.bf16 = micro, device, bf16
        self.params = list(self.model.parameters())
        self.master = [p.detach().float().clone() for p in self.params] if bf16 else self.params
        fused = {"fused": True} if device.startswith("cuda") else {}
        self.optimizer = torch.optim.AdamW(self.master, lr=1e-6, **fused)

    def step(self, seqs: Sequences) -> float:
        """One update; returns the gradient norm before clipping."""
        tokens, masks, rollout, advantages = seqs
        total = sum(sum(m[1:]) for m in masks)
        for start in range(0, len(tokens), self.micro):
            part = slice(start, start + self.micro)
            b = TrainBatch.collate(tokens[part], masks[part], rollout[part], advantages[part])
            b = b.to(self.device)
            logits = self.model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
            new = token_logprobs(logits, b.input_ids)
            iw = importance_weights(new.detach(), b.rollout_logprobs, b.loss_mask, "tis")
            out = policy_loss(
                new, new.detach(), b.advantages, b.loss_mask, eps_high=0.28, weights=iw.weights
            )
            (out.loss * (sum(sum(m[1:]) for m in masks[part]) / total)).backward()
        if self.bf16:
            for master, p in zip(self.master, self.params, strict=True):
                master.grad = p.grad.float()  # type: ignore[union-attr]
                p.grad = None
        norm = torch.nn.utils.clip_grad_norm_(self.master, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.bf16:
            with torch.no_grad():
                for master, p in zip(self.master, self.params, strict=True):
                    p.copy_(master)
        return float(norm)


@dataclass
class Timing:
    seconds: float  # mean over the timed steps
    peak_gib: float  # the device's peak allocated memory over warm-up and steps (CUDA)


def time_steps(step: Callable[[], Any], steps: int, device: str) -> Timing:
    """One warm-up step, then the mean wall time of `steps` more (the device synchronised)."""
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    step()
    if cuda:
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - started) / steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0
    return Timing(seconds, peak)


def build_model(out: Path, config: Any, seed: int = 0) -> Path:
    """A random model of `config` saved under `out` (no download)."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out
