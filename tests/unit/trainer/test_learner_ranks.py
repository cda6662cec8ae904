"""A learner of several ranks, without the ranks: how a batch is shared out among them, how
their losses add up to one rank's, and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the learner needs the train extra")

from agenthub.trainer import TrainBatch  # noqa: E402
from agenthub.trainer._config import RayConfig  # noqa: E402
from agenthub.trainer._importance import GapMeter, importance_weights  # noqa: E402
from agenthub.trainer._learner import check_checkpoint_ranks  # noqa: E402
from agenthub.trainer._loss import policy_loss  # noqa: E402
from agenthub.trainer._ranks import all_gather, all_reduce  # noqa: E402

LENGTHS = [60, 9, 33, 17, 48, 5, 26, 40]


def batch(lengths: list[int] = LENGTHS) -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    tokens = [torch.randint(3, 100, (n,), generator=g).tolist() for n in lengths]
    masks = [[0] * 2 + [1] * (n - 2) for n in lengths]
    logprobs = [(-torch.rand(n, generator=g)).tolist() for n in lengths]
    advantages = torch.randn(len(lengths), generator=g).tolist()
    return TrainBatch.collate(tokens, masks, logprobs, advantages)


def same(a: TrainBatch, b: TrainBatch) -> bool:
    return torch.equal(a.input_ids, b.input_ids) and torch.equal(a.loss_mask, b.loss_mask)


def tokens_of(chunk: TrainBatch) -> int:
    return int(chunk.attention_mask.sum())


@pytest.mark.parametrize("ranks", [2, 3])
def test_the_ranks_share_out_one_ranks_micro_batches_balanced_by_tokens(ranks: int) -> None:
    whole = batch()
    chunks = whole.micro_batches(2)
    shares = whole.shard(ranks, micro_batch_size=2)
    assert len(shares) == ranks
    dealt = [c for share in shares for c in share]
    assert len(dealt) == len(chunks)
    assert all(sum(same(c, d) for d in dealt) == 1 for c in chunks), "each one once"
    loads = [sum(map(tokens_of, share)) for share in shares]
    # Greedy by tokens: no rank holds more than another plus one micro-batch.
    assert max(loads) - min(loads) <= max(map(tokens_of, chunks))


def test_tokens_not_micro_batch_counts_decide_the_shares() -> None:
    # One long sequence against six short ones: halving by count would give one rank 110
    # tokens and the other 15; by tokens the long one is a share of its own.
    whole = batch([100, 5, 5, 5, 5, 5, 5])
    first, second = whole.shard(2, micro_batch_size=1)
    assert [tokens_of(c) for c in first] == [100]
    assert [tokens_of(c) for c in second] == [5] * 6


def test_one_rank_gets_the_micro_batches_it_always_had() -> None:
    whole = batch()
    (share,) = whole.shard(1, micro_batch_size=3)
    plain = whole.micro_batches(3)
    assert len(share) == len(plain)
    assert all(same(a, b) for a, b in zip(share, plain, strict=True))


def test_more_ranks_than_micro_batches_leaves_some_ranks_none() -> None:
    shares = batch([10, 20]).shard(3, micro_batch_size=4)
    assert [len(s) for s in shares] == [1, 0, 0]


def test_an_idle_micro_batch_runs_the_model_and_learns_nothing() -> None:
    whole = batch([7, 30, 12])
    per_token = TrainBatch.collate(
        [[5] * 7, [6] * 30], [[1] * 7, [1] * 30], [[0.0] * 7, [0.0] * 30],
        torch.ones(2, 30), rewards=[1.0, 2.0],
    )  # fmt: skip
    for source in (whole, per_token):
        idle = source.idle()
        assert len(idle) == 1 and idle.input_ids.shape[1] == 7  # its own length, no padding
        assert int(idle.loss_mask.sum()) == 0 and float(idle.advantages.abs().sum()) == 0.0
        assert idle.rewards is None or float(idle.rewards.abs().sum()) == 0.0


@pytest.mark.parametrize(
    "aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
@pytest.mark.parametrize("ranks", [2, 3])
def test_the_ranks_losses_average_to_one_ranks_loss(aggregation: str, ranks: int) -> None:
    whole = batch()
    width = int(whole.input_ids.shape[1])

    def loss(chunk: TrainBatch) -> float:
        # A policy's logprobs that depend on the tokens alone, as a model's would.
        new = -(chunk.input_ids.float() * 0.37 % 1.3) * chunk.attention_mask
        out = policy_loss(
            new,
            chunk.rollout_logprobs,
            chunk.advantages,
            chunk.loss_mask,
            aggregation=aggregation,  # type: ignore[arg-type]
            max_tokens=width,
        )
        return float(out.loss)

    # The learner weighs each micro-batch by its share of the sequences, times the ranks.
    one = sum(loss(c) * len(c) / len(whole) for c in whole.micro_batches(2))
    per_rank = [
        sum(loss(c) * (len(c) / len(whole) * ranks) for c in share)
        for share in whole.shard(ranks, micro_batch_size=2)
    ]
    # DeepSpeed averages the ranks' gradients: the mean of the ranks' losses is what is learned.
    assert sum(per_rank) / ranks == pytest.approx(one, rel=1e-6)


def test_one_rank_reduces_and_gathers_nothing() -> None:
    values = torch.tensor([1.5, -2.0])
    assert all_gather(values) is values
    assert all_reduce([1.5, 2], torch.device("cpu"), "max") == [1.5, 2.0]


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
