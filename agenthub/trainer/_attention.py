"""Attention within each of the sequences packed into one row, computing nothing across them.

transformers reads restarting position ids as packed sequences and, for `sdpa`, builds a
block-diagonal causal mask over the whole row: correct, but the kernel still computes every
query against every key of the row, so a row of eight 1,024-token sequences costs eight times
the attention of the eight alone. This attention, registered with transformers under
`NAME` (its `AttentionInterface`, the documented way to add one), takes the packed sequences'
boundaries (`cu_seq_lens_q` and `max_length_q`, the keyword arguments transformers' own
flash-attention path reads) and attends within each:

- on a CUDA device in bf16 or fp16, with torch's variable-length flash-attention kernel
  (`torch.nn.attention.varlen`, torch 2.10 and later);
- elsewhere, with `scaled_dot_product_attention` over each sequence in turn (causal, no mask).

A model whose attention is already a flash-attention implementation keeps it: transformers'
`flash_attention_2/3` read the same arguments.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import torch

from agenthub.trainer._packing import Packed

__all__ = ["NAME", "no_masks", "packed_inputs", "use_packed_attention"]

NAME = "agenthub_packed"
_KEEP = ("flash_attention_2", "flash_attention_3", "flash_attention_4")


def _varlen_kernel() -> Any:
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def _on_kernel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """[N, H, D] attention through torch's varlen kernel, whose keywords changed between torch
    versions: 2.10 takes `is_causal` and as many key as query heads; later ones a `window_size`
    ((-1, 0) is causal), `scale` and, from 2.12, `enable_gqa`."""
    kernel = _varlen_kernel()
    params = inspect.signature(kernel).parameters
    heads = q.shape[1] // k.shape[1]
    if heads > 1 and "enable_gqa" not in params:
        k, v = k.repeat_interleave(heads, dim=1), v.repeat_interleave(heads, dim=1)
    extra: dict[str, Any] = {}
    if "enable_gqa" in params and heads > 1:
        extra["enable_gqa"] = True
    if "window_size" in params:
        extra["window_size"] = (-1, 0)
    else:
        extra["is_causal"] = True
    if "scale" in params:
        extra["scale"] = kw["scale"]
    cu, longest = kw["cu_seqlens"], kw["max_length"]
    q, k, v = (t.contiguous() for t in (q, k, v))
    out: torch.Tensor = kernel(q, k, v, cu, cu, longest, longest, **extra)
    return out


def _per_sequence(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw: Any) -> torch.Tensor:
    """[N, H, D] attention of each sequence alone with `scaled_dot_product_attention`."""
    bounds = kw["cu_seqlens"].tolist()
    heads = q.shape[1] // k.shape[1]
    parts = []
    for start, stop in itertools.pairwise(bounds):
        part = torch.nn.functional.scaled_dot_product_attention(
            q[start:stop].transpose(0, 1),
            k[start:stop].transpose(0, 1).repeat_interleave(heads, dim=0),
            v[start:stop].transpose(0, 1).repeat_interleave(heads, dim=0),
            is_causal=True,
            scale=kw["scale"],
        )
        parts.append(part.transpose(0, 1))
    return torch.cat(parts)


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: [B, H, N, D] query, key and value in, [B, N, H, D]
    out. With the packing arguments, B is 1 and the row holds several sequences; without them
    (a forward pass that is not the learner's), a row without a mask is one sequence, and a
    padded batch goes to `sdpa` with its mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    cu = kwargs.get("cu_seq_lens_q")
    if cu is None and (attention_mask is not None or query.shape[0] != 1):
        padded: tuple[Any, None] = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling
        )
        return padded
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    if cu is None:
        cu = torch.tensor([0, q.shape[0]], dtype=torch.int32, device=q.device)
    longest = kwargs.get("max_length_q") or q.shape[0]
    scale = scaling if scaling is not None else q.shape[-1] ** -0.5
    on_kernel = q.is_cuda and q.dtype in (torch.float16, torch.bfloat16)
    run = _on_kernel if on_kernel and _varlen_kernel() is not None else _per_sequence
    out = run(q, k, v, cu_seqlens=cu, max_length=int(longest), scale=scale)
    return out.unsqueeze(0), None


def _packed_mask(batch_size: int, **kwargs: Any) -> Any:
    """No mask for one row without padding (the packing arguments bound the sequences); the
    `sdpa` mask for anything else."""
    from transformers.masking_utils import sdpa_mask

    if batch_size == 1 and kwargs.get("attention_mask") is None:
        return None
    return sdpa_mask(batch_size=batch_size, **kwargs)


def use_packed_attention(model: Any) -> None:
    """Give `model` (a transformers model) this attention, unless it has flash attention."""
    from transformers import AttentionInterface, AttentionMaskInterface

    if getattr(model.config, "_attn_implementation", None) in _KEEP:
        return
    AttentionInterface.register(NAME, packed_attention)
    AttentionMaskInterface.register(NAME, _packed_mask)
    model.set_attn_implementation(NAME)


def packed_inputs(packed: Packed) -> dict[str, Any]:
    """Keyword arguments of a transformers forward pass over `packed`: its ids, positions
    restarting with each sequence, the sequences' boundaries, and no cache (with one,
    transformers would not read the restarts as packed sequences)."""
    return {
        "input_ids": packed.input_ids,
        "position_ids": packed.position_ids,
        "use_cache": False,
        **packed.attention_kwargs(),
    }


def no_masks(model: Any) -> dict[str, Any]:
    """For a model under this attention, masks given as none at all (a mapping by layer
    type), where transformers would otherwise build them and first find the packing from the
    positions by waiting for the device; nothing for any other model."""
    config = model.config
    layer_types = getattr(config, "layer_types", None)
    if getattr(config, "_attn_implementation", None) != NAME or not layer_types:
        return {}
    return {"attention_mask": dict.fromkeys(layer_types)}
