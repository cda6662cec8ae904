"""The learner's batch: per-token values of every sequence, right-padded to one length."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from agenthub.trainer._packing import Packed, first_fit_decreasing, pack

_Fn = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TrainBatch:
    """Sequences right-padded to one length; every per-token tensor is aligned with
    `input_ids` (position t holds the value for token t; token 0 is never trained on)."""

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] 1 on real tokens
    loss_mask: torch.Tensor  # [B, T] 1 on tokens the model sampled
    rollout_logprobs: torch.Tensor  # [B, T] the rollout engine's logprobs, 0 where mask is 0
    advantages: torch.Tensor  # [B] per sequence, or [B, T] per token
    rewards: torch.Tensor | None = None  # [B] episode rewards, for a learner with a critic
    policy_versions: torch.Tensor | None = None  # [B, T] long: the policy that sampled each token

    @classmethod
    def collate(
        cls,
        tokens: Sequence[Sequence[int]],
        loss_masks: Sequence[Sequence[int]],
        rollout_logprobs: Sequence[Sequence[float]],
        advantages: Sequence[float] | torch.Tensor,
        *,
        rewards: Sequence[float] | None = None,
        policy_versions: Sequence[Sequence[int]] | None = None,
        pad_id: int = 0,
    ) -> TrainBatch:
        if not tokens:
            raise ValueError("a train batch needs at least one sequence")
        width = max(len(t) for t in tokens)
        ids = torch.full((len(tokens), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(tokens), width), dtype=torch.long)
        mask = torch.zeros((len(tokens), width), dtype=torch.long)
        logprobs = torch.zeros((len(tokens), width), dtype=torch.float32)
        for i, (t, m, lp) in enumerate(zip(tokens, loss_masks, rollout_logprobs, strict=True)):
            if not len(t) == len(m) == len(lp):
                raise ValueError(f"sequence {i}: tokens, loss mask and logprobs differ in length")
            ids[i, : len(t)] = torch.tensor(t)
            attention[i, : len(t)] = 1
            mask[i, : len(t)] = torch.tensor(m)
            logprobs[i, : len(t)] = torch.tensor(lp)
        mask[:, 0] = 0  # nothing predicts the first token
        return cls(
            ids,
            attention,
            mask,
            logprobs,
            torch.as_tensor(advantages, dtype=torch.float32),
            None if rewards is None else torch.as_tensor(rewards, dtype=torch.float32),
            None if policy_versions is None else _versions(policy_versions, tokens, width),
        )

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def _map(self, per_token: _Fn, per_sequence: _Fn) -> TrainBatch:
        """A batch with `per_token` applied to every [B, T] tensor and `per_sequence` to
        every [B] one."""
        adv = per_sequence if self.advantages.dim() == 1 else per_token
        return TrainBatch(
            per_token(self.input_ids),
            per_token(self.attention_mask),
            per_token(self.loss_mask),
            per_token(self.rollout_logprobs),
            adv(self.advantages),
            None if self.rewards is None else per_sequence(self.rewards),
            None if self.policy_versions is None else per_token(self.policy_versions),
        )

    def to(self, device: torch.device | str) -> TrainBatch:
        """The same batch on `device`."""
        return self._map(lambda t: t.to(device), lambda t: t.to(device))

    def micro_batches(self, size: int, *, max_tokens: int | None = None) -> list[TrainBatch]:
        """Split into micro-batches, each cut to its own longest sequence: of up to `size`
        sequences of similar length, or, with `max_tokens`, of as many sequences as fit in that
        many tokens (first-fit decreasing; a longer sequence alone). Padding costs as much
        compute as tokens in a padded forward pass, and episodes differ in length several-fold;
        the learner's forward pass packs each micro-batch (`pack`), so it computes on none."""
        lengths = self.attention_mask.sum(dim=1)
        if max_tokens is not None:
            groups = [torch.tensor(g) for g in first_fit_decreasing(lengths.tolist(), max_tokens)]
        else:
            order = torch.argsort(lengths, descending=True, stable=True)
            groups = [order[start : start + size] for start in range(0, len(self), size)]
        out = []
        for rows in groups:
            width = max(int(lengths[rows].max()), 1)
            out.append(self._map(lambda t: t[rows, :width], lambda t: t[rows]))  # noqa: B023
        return out

    def slice(self, start: int, stop: int) -> TrainBatch:
        return self._map(lambda t: t[start:stop], lambda t: t[start:stop])

    def idle(self) -> TrainBatch:
        """A micro-batch of this batch's first sequence with nothing to learn (no loss-mask
        token, advantage 0): a rank with fewer micro-batches than the others runs such ones,
        so that every rank takes part in as many of the group's collectives."""
        width = max(int(self.attention_mask[0].sum()), 1)
        one = self._map(lambda t: t[:1, :width], lambda t: t[:1])
        return replace(
            one,
            loss_mask=torch.zeros_like(one.loss_mask),
            advantages=torch.zeros_like(one.advantages),
            rewards=None if one.rewards is None else torch.zeros_like(one.rewards),
        )

    def shard(
        self, ranks: int, micro_batch_size: int, max_tokens: int | None = None
    ) -> list[list[TrainBatch]]:
        """The micro-batches one learner takes (`micro_batches`), shared out among `ranks`
        data-parallel ranks by tokens: each, most tokens first, goes to the rank with the
        fewest so far (ties: the lower rank), and each rank keeps them in their order. Whole
        micro-batches move, so the loss a rank takes of each is the one a learner of one rank
        takes: N ranks take one rank's step. One rank gets `micro_batches` unchanged."""
        if ranks < 1:
            raise ValueError(f"a batch is shared among 1 or more ranks, not {ranks}")
        chunks = self.micro_batches(micro_batch_size, max_tokens=max_tokens)
        tokens = [int(c.attention_mask.sum()) for c in chunks]
        owners = [0] * len(chunks)
        loads = [0] * ranks
        for i in sorted(range(len(chunks)), key=lambda i: -tokens[i]):
            owners[i] = least = min(range(ranks), key=lambda r: loads[r])
            loads[least] += tokens[i]
        return [[c for c, o in zip(chunks, owners, strict=True) if o == r] for r in range(ranks)]


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of a learner step: its per-token values ([B, T], for the loss), the
    same sequences packed for the model, and its weight in the batch loss (0: one that only
    keeps a rank in step with the others)."""

    batch: TrainBatch
    packed: Packed
    share: float

    @classmethod
    def of(cls, batch: TrainBatch, device: torch.device | str, share: float = 1.0) -> MicroBatch:
        """`batch` packed (on the host, where the shapes it reads cost no wait for the
        device) and moved to `device`."""
        host = batch.to("cpu")
        packed = pack(host.input_ids, host.attention_mask, host.loss_mask)
        return cls(host.to(device), packed.to(device), share)


def plan_micro_batches(
    batch: TrainBatch,
    *,
    ranks: int,
    rank: int,
    micro_batch_size: int,
    max_tokens: int | None,
    by_tokens: bool,
    device: torch.device | str,
) -> list[MicroBatch]:
    """Rank `rank`'s micro-batches of `batch` (`TrainBatch.shard`), packed and on `device`,
    each with its weight in the batch loss: its share of the batch's model tokens when the loss
    is a mean over tokens (`by_tokens`), else its share of the sequences. Every rank runs as
    many micro-batches, DeepSpeed's collectives being per backward pass: those of a rank with
    fewer learn nothing and weigh nothing. Planned on the host, whose shapes cost no wait."""
    batch = batch.to("cpu")
    shares = batch.shard(ranks, micro_batch_size, max_tokens)
    mine = shares[rank]
    idle = max(len(s) for s in shares) - len(mine)
    total = max(int(batch.loss_mask.sum()), 1) if by_tokens else len(batch)
    plan = []
    for chunk in mine:
        size = int(chunk.loss_mask.sum()) if by_tokens else len(chunk)
        plan.append(MicroBatch.of(chunk, device, size / total))
    return plan + [MicroBatch.of(batch.idle(), device, 0.0)] * idle


def _versions(
    versions: Sequence[Sequence[int]], tokens: Sequence[Sequence[int]], width: int
) -> torch.Tensor:
    """[B, T] policy versions, padded with -1 (no policy sampled padding)."""
    out = torch.full((len(tokens), width), -1, dtype=torch.long)
    for i, (v, t) in enumerate(zip(versions, tokens, strict=True)):
        if len(v) != len(t):
            raise ValueError(f"sequence {i}: tokens and policy versions differ in length")
        out[i, : len(v)] = torch.tensor(v, dtype=torch.long)
    return out


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log p(token t | tokens < t), aligned with `input_ids` (position 0 gets 0)."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(picked, (1, 0))
