"""Packed micro-batches and chunked logprobs compute what the padded, full-vocabulary
computation does: the same logprobs, the same batch loss for every aggregation, the same
gradients (fp32, to 1e-5)."""

import random
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")
transformers = pytest.importorskip("transformers", reason="the trainer needs the train extra")

from agenthub.trainer import TrainBatch, policy_loss, token_logprobs  # noqa: E402
from agenthub.trainer._batch import plan_micro_batches  # noqa: E402
from agenthub.trainer._logprobs import PolicyModel, chunked_logprobs, packed_logprobs  # noqa: E402
from agenthub.trainer._packing import first_fit_decreasing, pack  # noqa: E402

AGGREGATIONS = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]


@pytest.fixture(scope="module")
def model() -> Any:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    return transformers.Qwen2ForCausalLM(config).eval()


def agent_batch(seed: int = 0, sequences: int = 7) -> TrainBatch:
    """Sequences of different lengths, each a prompt and turns of model and env tokens."""
    rng = random.Random(seed)
    tokens, masks, rollout = [], [], []
    for _ in range(sequences):
        prompt, turns = rng.randint(2, 6), rng.randint(1, 3)
        mask = [0] * prompt
        for _ in range(turns):
            mask += [1] * rng.randint(1, 9) + [0] * rng.randint(0, 4)
        tokens.append([rng.randrange(97) for _ in mask])
        masks.append(mask)
        rollout.append([-rng.random() * 3 if m else 0.0 for m in mask])
    advantages = [rng.uniform(-1, 1) for _ in tokens]
    return TrainBatch.collate(tokens, masks, rollout, advantages)


def padded_logprobs(model: Any, b: TrainBatch) -> Any:
    logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    return token_logprobs(logits, b.input_ids) * b.loss_mask


def grads(model: Any) -> list[Any]:
    out = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return out


def test_first_fit_decreasing_fills_bins_within_the_budget() -> None:
    lengths = [9, 3, 7, 2, 5, 12, 1, 4]
    bins = first_fit_decreasing(lengths, 10)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert bins[0] == [5], "longer than the budget: alone, never dropped"
    assert all(sum(lengths[i] for i in b) <= 10 for b in bins[1:])
    assert [sum(lengths[i] for i in b) for b in bins] == sorted(
        (sum(lengths[i] for i in b) for b in bins), reverse=True
    )
    assert len(bins) == 5  # 12 | 9+1 | 7+3 | 5+4 | 2: fewest bins for these lengths
    with pytest.raises(ValueError, match="at least 1 token"):
        first_fit_decreasing(lengths, 0)


def test_packing_puts_each_sequence_end_to_end_with_its_own_positions() -> None:
    b = TrainBatch.collate([[1, 2, 3], [4, 5]], [[0, 1, 1], [0, 1]], [[0.0] * 3, [0.0] * 2], [1, 1])
    p = pack(b.input_ids, b.attention_mask, b.loss_mask)
    assert p.input_ids.tolist() == [[1, 2, 3, 4, 5]]
    assert p.position_ids.tolist() == [[0, 1, 2, 0, 1]]
    assert p.targets.tolist() == [1, 2, 4] and p.tokens == 5
    assert p.unpack_targets(torch.tensor([7.0, 8.0, 9.0])).tolist() == [[0, 7, 8], [0, 9, 0]]
    assert p.unpack(torch.arange(5.0)).tolist() == [[0, 1, 2], [3, 4, 0]]


def test_packed_logprobs_and_their_gradients_equal_the_padded_ones(model: Any) -> None:
    b = agent_batch()
    weights = torch.randn(b.loss_mask.shape) * b.loss_mask
    want = padded_logprobs(model, b)
    (want * weights).sum().backward()
    want_grads = grads(model)
    for chunk_tokens in (1, 5, 1024):
        got = packed_logprobs(PolicyModel(model, chunk_tokens), pack(*_packable(b)))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        (got * weights).sum().backward()
        for g, w in zip(grads(model), want_grads, strict=True):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("bias", [False, True], ids=["own-backward", "checkpointed-module"])
def test_chunked_logprobs_equal_the_full_log_softmax_with_gradients(bias: bool) -> None:
    torch.manual_seed(1)
    head = torch.nn.Linear(16, 50, bias=bias)
    hidden = torch.randn(23, 16, requires_grad=True)
    targets = torch.randint(0, 50, (23,))
    upstream = torch.randn(23)
    full = torch.log_softmax(head(hidden).float(), -1).gather(-1, targets[:, None]).squeeze(-1)
    want = torch.autograd.grad((full * upstream).sum(), [hidden, head.weight])
    for chunk_tokens in (1, 4, 23, 100):
        got = chunked_logprobs(hidden, targets, head, chunk_tokens)
        torch.testing.assert_close(got, full, atol=1e-6, rtol=1e-6)
        grads_ = torch.autograd.grad((got * upstream).sum(), [hidden, head.weight])
        assert got.grad_fn is not None and ("Chunked" in got.grad_fn.name()) is not bias
        for g, w in zip(grads_, want, strict=True):
            torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="at least 1"):
        chunked_logprobs(hidden, targets, head, 0)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("budget", [None, 1, 24, 60])
def test_the_packed_batch_loss_and_gradients_equal_the_padded_batch(
    model: Any, aggregation: str, budget: int | None
) -> None:
    """The batch loss as the learner adds it up over token-budget micro-batches (`budget`) or
    micro-batches of 3 sequences (None), each packed, against one padded pass over the whole
    batch with full-vocabulary logprobs; and a learner of 2 ranks takes the same loss."""
    b = agent_batch(seed=3)
    width = int(b.input_ids.shape[1])

    def loss(new: Any, chunk: TrainBatch) -> Any:
        return policy_loss(
            new,
            new.detach() - 0.1 * chunk.loss_mask,  # ratios away from 1: clipping takes part
            chunk.advantages,
            chunk.loss_mask,
            aggregation=aggregation,  # type: ignore[arg-type]
            max_tokens=width,
        ).loss

    want = loss(padded_logprobs(model, b), b)
    want.backward()
    want_grads = grads(model)
    policy = PolicyModel(model, 16)
    for ranks in (1, 2):
        total = torch.zeros(())
        for rank in range(ranks):
            plan = plan_micro_batches(
                b,
                ranks=ranks,
                rank=rank,
                micro_batch_size=3,
                max_tokens=budget,
                by_tokens=aggregation == "token-mean",
                device="cpu",
            )
            for micro in plan:
                part = loss(packed_logprobs(policy, micro.packed), micro.batch) * micro.share
                part.backward()
                total = total + part.detach()
        torch.testing.assert_close(total, want.detach(), atol=1e-5, rtol=1e-5)
        for g, w in zip(grads(model), want_grads, strict=True):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def _packable(b: TrainBatch) -> tuple[Any, Any, Any]:
    return b.input_ids, b.attention_mask, b.loss_mask
