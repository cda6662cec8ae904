"""Micro-batches by token budget, and sequences packed end to end for the model's forward pass.

A micro-batch keeps its per-token values (loss mask, rollout logprobs, advantages...) in the
padded [B, T] layout of `TrainBatch`, where the loss arithmetic is cheap; only the model sees
the packed layout: one row of every sequence's real tokens, position ids restarting at each
sequence, so no compute goes to padding and attention stays within each sequence (transformers
reads the restarts as packed sequences: a block-diagonal causal mask for `sdpa` and `eager`,
flash-attention's varlen kernels for `flash_attention_2/3`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Packed", "first_fit_decreasing", "pack"]


def first_fit_decreasing(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices of `lengths` grouped into bins of at most `budget` tokens: longest first, each
    into the first bin it fits, a new bin when none has room. A sequence longer than the budget
    gets a bin of its own (the budget bounds a micro-batch; it never drops a sequence). Bins come
    out fullest first; each lists its sequences longest first."""
    if budget < 1:
        raise ValueError(f"a micro-batch token budget is at least 1 token, not {budget}")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        for b, free in enumerate(room):
            if n <= free:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(budget - n)
    order = sorted(range(len(bins)), key=lambda b: room[b])
    return [bins[b] for b in order]


@dataclass(frozen=True)
class Packed:
    """A micro-batch's sequences packed into one row for the model.

    `targets` are the flat positions of the tokens whose logprob is wanted (the loss-mask
    tokens, or position 0 when there are none, so that a backward pass still reaches every
    weight: its value lands on a position no loss counts); the hidden state before each is at
    `targets - 1`. `rows` and `cols` place
    each target back into the micro-batch's [B, T] layout.
    """

    input_ids: torch.Tensor  # [1, N] long
    position_ids: torch.Tensor  # [1, N] long, restarting at 0 with each sequence
    targets: torch.Tensor  # [K] long, flat positions
    rows: torch.Tensor  # [K] long
    cols: torch.Tensor  # [K] long
    shape: tuple[int, int]  # the micro-batch's [B, T]
    flat_rows: torch.Tensor  # [N] long: the sequence of every packed token
    flat_cols: torch.Tensor  # [N] long: its position in that sequence
    cu_seqlens: torch.Tensor  # [B + 1] int32: where each sequence starts, and N
    max_length: int  # the longest sequence's length

    def attention_kwargs(self) -> dict[str, Any]:
        """The packed sequences' boundaries as transformers' attention reads them."""
        return {
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": self.max_length,
            "max_length_k": self.max_length,
        }

    @property
    def tokens(self) -> int:
        return int(self.input_ids.shape[1])

    def to(self, device: torch.device | str) -> Packed:
        def move(t: torch.Tensor) -> torch.Tensor:
            return t.to(device, non_blocking=True)

        return Packed(
            move(self.input_ids),
            move(self.position_ids),
            move(self.targets),
            move(self.rows),
            move(self.cols),
            self.shape,
            move(self.flat_rows),
            move(self.flat_cols),
            move(self.cu_seqlens),
            self.max_length,
        )

    def unpack_targets(self, values: torch.Tensor) -> torch.Tensor:
        """[B, T] with `values` ([K], one per target) in place and 0 elsewhere."""
        out = values.new_zeros(self.shape)
        return out.index_put((self.rows, self.cols), values)

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """[B, T] from a value per packed token ([N] or [1, N]), 0 on padding."""
        out = values.new_zeros(self.shape)
        return out.index_put((self.flat_rows, self.flat_cols), values.reshape(-1))


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor) -> Packed:
    """Pack right-padded [B, T] sequences (on the CPU, where the shapes it reads cost no device
    synchronisation) into one row."""
    real = attention_mask.bool()
    lengths = real.sum(dim=1)
    flat_rows, flat_cols = real.nonzero(as_tuple=True)
    starts = torch.cumsum(lengths, 0) - lengths
    rows, cols = (loss_mask.bool() & real).nonzero(as_tuple=True)
    if bool((cols == 0).any()):
        raise ValueError("a sequence's first token has no logprob: it cannot be in the loss mask")
    targets = starts[rows] + cols
    if targets.numel() == 0:  # nothing to learn: score the first token, weighted 0 later
        rows, cols, targets = (torch.zeros(1, dtype=torch.long) for _ in range(3))
    return Packed(
        input_ids=input_ids[real].reshape(1, -1),
        position_ids=flat_cols.reshape(1, -1).clone(),
        targets=targets,
        rows=rows,
        cols=cols,
        shape=(int(input_ids.shape[0]), int(input_ids.shape[1])),
        flat_rows=flat_rows,
        flat_cols=flat_cols,
        cu_seqlens=torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0)).to(torch.int32),
        max_length=int(lengths.max()),
    )
