"""A learner of several ranks, without the ranks: how a batch is shared out among them, how
their losses add up to the batch's, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the learner needs the train extra")

from agenthub.trainer import TrainBatch  # noqa: E402
from agenthub.trainer._config import RayConfig  # noqa: E402
from agenthub.trainer._importance import GapMeter, importance_weights  # noqa: E402
from agenthub.trainer._learner import LossScale, check_checkpoint_ranks  # noqa: E402
from agenthub.trainer._loss import policy_loss  # noqa: E402

LENGTHS = [60, 9, 33, 17, 48, 5, 26, 40]


def batch(lengths: list[int] = LENGTHS) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    tokens = [torch.randint(3, 100, (n,), generator=g).tolist() for n in lengths]
    masks = [[0] * 2 + [1] * (n - 2) for n in lengths]
    logprobs = [(-torch.rand(n, generator=g)).tolist() for n in lengths]
    advantages = torch.randn(len(lengths), generator=g).tolist()
    return TrainBatch.collate(tokens, masks, logprobs, advantages)


def rows_of(chunk: TrainBatch, whole: TrainBatch) -> list[int]:
    """Which of `whole`'s sequences `chunk` holds (matched by their tokens)."""
    found = []
    for ids, attention in zip(chunk.input_ids, chunk.attention_mask, strict=True):
        seq = ids[attention.bool()].tolist()
        for i in range(len(whole)):
            if whole.input_ids[i, : len(seq)].tolist() == seq and int(
                whole.attention_mask[i].sum()
            ) == len(seq):
                found.append(i)
    return found


def real(chunk: TrainBatch) -> bool:
    return bool(chunk.loss_mask.sum() > 0)


@pytest.mark.parametrize("ranks", [2, 3])
def test_a_batch_is_shared_by_tokens_and_every_rank_runs_as_many_micro_batches(
    ranks: int,
) -> None:
    whole = batch()
    shares = whole.shard(ranks, micro_batch_size=2)
    assert len(shares) == ranks
    assert len({len(s) for s in shares}) == 1  # the same count of micro-batches on every rank
    rows = [sorted(r for c in s if real(c) for r in rows_of(c, whole)) for s in shares]
    assert sorted(r for share in rows for r in share) == list(range(len(whole)))
    tokens = [sum(LENGTHS[r] for r in share) for share in rows]
    # Greedy by tokens: no rank holds more than the fair share plus one longest sequence.
    assert max(tokens) - min(tokens) <= max(LENGTHS)
    assert max(tokens) <= sum(LENGTHS) / ranks + max(LENGTHS) / 2


def test_tokens_not_sequence_counts_decide_the_shares() -> None:
    # One long sequence against six short ones: halving by count would give one rank 120
    # tokens and the other 15; by tokens the long one is a share of its own.
    whole = batch([100, 5, 5, 5, 5, 5, 5])
    shares = whole.shard(2, micro_batch_size=8)
    rows = [[r for c in s if real(c) for r in rows_of(c, whole)] for s in shares]
    assert sorted(map(sorted, rows)) == [[0], [1, 2, 3, 4, 5, 6]]


def test_a_rank_with_fewer_micro_batches_is_padded_with_ones_that_learn_nothing() -> None:
    whole = batch([100, 5, 5, 5, 5, 5, 5])
    long, short = sorted(whole.shard(2, micro_batch_size=2), key=lambda s: sum(map(real, s)))
    assert len(long) == len(short) == 3
    assert [real(c) for c in long] == [True, False, False]
    idle = long[1]
    assert len(idle) == 1 and int(idle.loss_mask.sum()) == 0
    assert float(idle.advantages.abs().sum()) == 0.0


def test_more_ranks_than_sequences_leaves_some_ranks_only_idle_micro_batches() -> None:
    shares = batch([10, 20]).shard(3, micro_batch_size=4)
    assert [len(s) for s in shares] == [1, 1, 1]
    assert sorted(real(s[0]) for s in shares) == [False, True, True]


def test_one_rank_gets_the_micro_batches_it_always_had() -> None:
    whole = batch()
    (share,) = whole.shard(1, micro_batch_size=3)
    plain = whole.micro_batches(3)
    assert len(share) == len(plain)
    for a, b in zip(share, plain, strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
@pytest.mark.parametrize("ranks", [1, 2, 3])
def test_the_ranks_losses_average_to_the_whole_batch_loss(aggregation: str, ranks: int) -> None:
    whole = batch()
    g = torch.Generator().manual_seed(1)

    def loss(chunk: TrainBatch) -> torch.Tensor:
        # A policy's logprobs that depend on the tokens alone, as a model's would.
        new = -(chunk.input_ids.float() * 0.37 % 1.3) * chunk.attention_mask
        out = policy_loss(
            new,
            chunk.rollout_logprobs,
            chunk.advantages,
            chunk.loss_mask,
            aggregation=aggregation,  # type: ignore[arg-type]
            max_tokens=int(whole.input_ids.shape[1]),
        )
        return out.loss

    del g
    expected = float(loss(whole))
    scale = LossScale.of(whole, ranks)
    per_rank = [
        sum(float(loss(c)) * scale.policy(c, aggregation) for c in share)  # type: ignore[arg-type]
        for share in whole.shard(ranks, micro_batch_size=2)
    ]
    # DeepSpeed averages the ranks' gradients: the mean of the ranks' losses is what is learned.
    assert sum(per_rank) / ranks == pytest.approx(expected, rel=1e-5)


def test_gap_meters_of_the_ranks_merge_into_the_whole_batch_meter() -> None:
    whole = batch()
    old = -(whole.input_ids.float() * 0.11 % 0.9)

    def measure(b: TrainBatch, o: torch.Tensor) -> GapMeter:
        meter = GapMeter()
        iw = importance_weights(o, b.rollout_logprobs, b.loss_mask, "tis", 0.5, 5.0)
        meter.add(o, b.rollout_logprobs, b.loss_mask, iw, None)
        return meter

    expected = measure(whole, old).metrics()
    halves = [measure(whole.slice(0, 3), old[:3]), measure(whole.slice(3, 8), old[3:])]
    metrics = [m.metrics() for m in halves]

    def reduce(values: list[float], op: str) -> list[float]:
        return [sum(v) if op == "sum" else max(v) for v in zip(*gathered[op], strict=True)]

    gathered: dict[str, list[list[float]]] = {"sum": [], "max": []}

    def collect(values: list[float], op: str) -> list[float]:
        gathered[op].append(values)
        return values

    for meter in halves:
        meter.merge(collect)
    merged = measure(whole.slice(0, 3), old[:3])
    merged.merge(reduce)
    assert merged.metrics() == pytest.approx(expected)
    assert metrics[0] != pytest.approx(expected)


def test_shares_of_a_gpu_are_refused_to_a_learner_of_several_ranks() -> None:
    with pytest.raises(ValueError, match="whole GPU per rank; set ray.learner_num_gpus=1"):
        RayConfig(learner_ranks=2, learner_num_gpus=0.5)
    assert RayConfig(learner_ranks=2, learner_num_gpus=1).learner_ranks == 2
    assert RayConfig(learner_ranks=1, learner_num_gpus=0.5).learner_num_gpus == 0.5


def test_a_checkpoint_of_another_number_of_ranks_is_refused(tmp_path: Path) -> None:
    for rank in range(2):
        (tmp_path / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    check_checkpoint_ranks(tmp_path, 2)
    with pytest.raises(ValueError, match="saved by a learner of 2 ranks.*learner_ranks=2"):
        check_checkpoint_ranks(tmp_path, 3)
    check_checkpoint_ranks(tmp_path / "plain", 5)  # ZeRO-0 keeps no shards: any count resumes
