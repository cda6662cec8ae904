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
