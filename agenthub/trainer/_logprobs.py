"""Token logprobs of a causal LM without [tokens x vocabulary] fp32 logits.

The output layer is the largest activation of a small model's step: for a 152k vocabulary, the
fp32 `log_softmax` of one 1,024-token sequence is 0.6 GB, and autograd keeps it (and the logits
it came from) until the backward pass. Here the hidden states go through the output layer a
chunk of tokens at a time (`_ChunkedLogprobs`, a custom autograd function): the forward pass
keeps each token's logprob and log-sum-exp, the backward pass computes one chunk's logits again
and turns them in place into that chunk's gradient (softmax, minus one at the target, times
the upstream gradient), so one chunk's fp32 logits is all that ever exists. Only the tokens the
loss reads are scored (the rest of a sequence still runs through the body, which the attention
of the scored ones needs). Under ZeRO-3 the output layer's weight exists only inside its
module's call, so there each chunk goes through the module under `torch.utils.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from agenthub.trainer._attention import no_masks, packed_inputs, use_packed_attention
from agenthub.trainer._packing import Packed

__all__ = ["PolicyModel", "chunked_logprobs", "packed_logprobs", "train_without_dropout"]

# Config fields by which some architectures change their logits after the output layer
# (Gemma's soft-capping, Cohere's and Granite's scaling): those models score tokens through
# their own forward, which applies them.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def _picked(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits: torch.Tensor = head(hidden).float()
    return logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)


class _ChunkedLogprobs(torch.autograd.Function):  # type: ignore[misc]
    """log softmax(hidden @ weight.T)[targets], `chunk` tokens of logits at a time."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int
    ) -> torch.Tensor:
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        for start in range(0, int(hidden.shape[0]), chunk):
            part = slice(start, start + chunk)
            logits = (hidden[part] @ weight.T).float()
            lse[part] = torch.logsumexp(logits, dim=-1)
            out[part] = logits.gather(-1, targets[part, None]).squeeze(-1) - lse[part]
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        want_hidden, want_weight = ctx.needs_input_grad[:2]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        for start in range(0, int(hidden.shape[0]), ctx.chunk):
            part = slice(start, start + ctx.chunk)
            g = grad[part, None].float()
            # d(logit_target - lse)/d logits = onehot(target) - softmax, in place on the logits
            dz = (hidden[part] @ weight.T).float().sub_(lse[part, None]).exp_().mul_(-g)
            dz.scatter_add_(1, targets[part, None], g)
            dz = dz.to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[part] = dz @ weight
            if grad_weight is not None:
                grad_weight += (dz.T @ hidden[part]).float()
        out_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        return grad_hidden, out_weight, None, None


def chunked_logprobs(
    hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module, chunk_tokens: int
) -> torch.Tensor:
    """log softmax(head(hidden))[targets] for [K, H] hidden states and [K] targets, in fp32,
    holding at most `chunk_tokens` x vocabulary logits at a time (in the backward pass too).
    `head` is a bias-free linear output layer (a causal LM's)."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, not {chunk_tokens}")
    weight = head.weight
    if getattr(head, "bias", None) is None and not hasattr(weight, "ds_id"):
        apply: Any = _ChunkedLogprobs.apply
        out: torch.Tensor = apply(hidden, weight, targets, chunk_tokens)
        return out
    parts = []  # a weight ZeRO-3 partitions (or a bias): through the module, checkpointed
    for start in range(0, int(hidden.shape[0]), chunk_tokens):
        h, t = hidden[start : start + chunk_tokens], targets[start : start + chunk_tokens]
        if torch.is_grad_enabled() and h.requires_grad:
            parts.append(checkpoint(_picked, head, h, t, use_reentrant=False))
        else:
            parts.append(_picked(head, h, t))
    return torch.cat(parts)


class PolicyModel(torch.nn.Module):  # type: ignore[misc]
    """A Hugging Face causal LM as the learner trains it: `forward` takes a packed row of
    sequences (`Packed`) and returns the logprob of each target token, [K] in fp32.

    It is the module DeepSpeed wraps, so that its backward hooks see the tensor the loss is
    computed from. Its `state_dict` is the language model's own, under the same names, so
    checkpoints and exported weights read as the model's.
    """

    def __init__(self, model: Any, chunk_tokens: int) -> None:
        super().__init__()
        use_packed_attention(model)
        self._no_masks = no_masks(model)
        self.model = model
        self.chunk_tokens = chunk_tokens
        config = model.config
        self._own_logits = any(getattr(config, k, None) for k in _LOGIT_TRANSFORMS)

    def forward(self, targets: torch.Tensor, **inputs: Any) -> torch.Tensor:
        """The logprob of each of `targets` (flat positions) given the tokens before it in its
        sequence; `inputs` are the packed row's (`packed_inputs`)."""
        before = (targets - 1).clamp_min(0)
        picked = inputs["input_ids"][0, targets]
        inputs |= self._no_masks
        if self._own_logits:
            logits = self.model(**inputs, logits_to_keep=before).logits[0]
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            return logprobs.gather(-1, picked[:, None]).squeeze(-1)
        hidden = self.model.get_decoder()(**inputs).last_hidden_state[0]
        head = self.model.get_output_embeddings()
        return chunked_logprobs(hidden[before], picked, head, self.chunk_tokens)

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        return self.model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self.model.load_state_dict(state_dict, strict=strict, assign=assign)


def packed_logprobs(module: Callable[..., torch.Tensor], packed: Packed) -> torch.Tensor:
    """[B, T]: each loss-mask token's logprob in the micro-batch's layout, 0 elsewhere, from a
    `PolicyModel` or the DeepSpeed engine around one."""
    scores = module(targets=packed.targets, **packed_inputs(packed))
    return packed.unpack_targets(scores)


def train_without_dropout(model: Any) -> Any:
    """`model` in training mode (which gradient checkpointing needs) with every dropout off:
    the learner's logprobs must be those of the policy the engines sample, and a value head's
    dropout (transformers' token classifiers have one) would make values noisy."""
    model.train()
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            setattr(module, "attention_dropout", 0.0)  # noqa: B010
    return model
