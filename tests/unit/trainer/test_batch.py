import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer import TrainBatch, token_logprobs  # noqa: E402


def test_collate_pads_right_and_never_trains_on_the_first_token() -> None:
    b = TrainBatch.collate(
        [[1, 2, 3], [4, 5]], [[1, 0, 1], [0, 1]], [[0.5, 0, -1], [0, -2]], [1.0, 0.0], pad_id=9
    )
    assert b.input_ids.tolist() == [[1, 2, 3], [4, 5, 9]]
    assert b.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 1], [0, 1, 0]]
    assert b.rollout_logprobs[1].tolist() == [0.0, -2.0, 0.0]
    assert len(b) == 2 and len(b.slice(1, 2)) == 1
    with pytest.raises(ValueError, match="differ in length"):
        TrainBatch.collate([[1, 2]], [[1]], [[0.0, 0.0]], [1.0])
    with pytest.raises(ValueError, match="at least one sequence"):
        TrainBatch.collate([], [], [], [])


def test_token_logprobs_align_with_the_tokens_they_score() -> None:
    logits = torch.randn(1, 4, 7)
    ids = torch.tensor([[3, 1, 6, 2]])
    got = token_logprobs(logits, ids)
    want = [0.0] + [float(torch.log_softmax(logits[0, t - 1], -1)[ids[0, t]]) for t in (1, 2, 3)]
    assert got[0].tolist() == pytest.approx(want, abs=1e-6)


def test_micro_batches_group_similar_lengths_and_drop_their_padding() -> None:
    lengths = [2, 9, 3, 8]
    b = TrainBatch.collate(
        [list(range(1, n + 1)) for n in lengths],
        [[1] * n for n in lengths],
        [[-0.5] * n for n in lengths],
        [0.1, 0.2, 0.3, 0.4],
    )
    first, second = b.micro_batches(2)
    assert first.input_ids.shape == (2, 9) and second.input_ids.shape == (2, 3)
    assert first.advantages.tolist() == pytest.approx([0.2, 0.4])
    assert second.advantages.tolist() == pytest.approx([0.3, 0.1])
    assert int(first.loss_mask.sum() + second.loss_mask.sum()) == int(b.loss_mask.sum())
    per_token = TrainBatch(
        b.input_ids,
        b.attention_mask,
        b.loss_mask,
        b.rollout_logprobs,
        torch.arange(36.0).view(4, 9),
    )
    assert per_token.micro_batches(2)[1].advantages.tolist() == [
        [18.0, 19.0, 20.0],
        [0.0, 1.0, 2.0],
    ]


def test_episode_rewards_follow_their_rows_and_sit_on_the_last_model_token() -> None:
    from agenthub.trainer._critic import final_token_rewards

    b = TrainBatch.collate(
        [[1, 2, 3, 4], [5, 6], [7, 8, 9]],
        [[0, 1, 1, 0], [0, 0], [0, 1, 1]],
        [[0.0] * 4, [0.0] * 2, [0.0] * 3],
        [0.0, 0.0, 0.0],
        rewards=[1.0, 0.5, -1.0],
    )
    assert final_token_rewards(b).tolist() == [[0, 0, 1, 0], [0, 0, 0, 0], [0, 0, -1, 0]]
    first, second = b.micro_batches(2)
    assert first.rewards is not None and second.rewards is not None
    assert first.rewards.tolist() == [1.0, -1.0] and second.rewards.tolist() == [0.5]
    assert final_token_rewards(first).tolist() == [[0, 0, 1, 0], [0, 0, -1, 0]]
    assert b.slice(1, 3).rewards.tolist() == [0.5, -1.0]  # type: ignore[union-attr]
    plain = TrainBatch.collate([[1, 2]], [[0, 1]], [[0.0, 0.0]], [1.0])
    assert plain.rewards is None and plain.micro_batches(1)[0].rewards is None
    with pytest.raises(ValueError, match="needs the batch's episode rewards"):
        final_token_rewards(plain)
