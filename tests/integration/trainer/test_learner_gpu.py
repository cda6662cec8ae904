"""The learner on a CUDA GPU (`make test-gpu`; deselected elsewhere): packed sequences through
torch's variable-length flash-attention kernel in bf16, and a learner step with token-budget
micro-batches."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the learner needs the train extra")
transformers = pytest.importorskip("transformers", reason="the learner needs the train extra")

from agenthub.trainer import TrainBatch, token_logprobs  # noqa: E402
from agenthub.trainer._attention import _varlen_kernel  # noqa: E402
from agenthub.trainer._batch import MicroBatch  # noqa: E402
from agenthub.trainer._logprobs import PolicyModel, packed_logprobs  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.gpu, pytest.mark.timeout(600)]

# bf16 keeps 8 bits of mantissa: a logprob of a few nats through 4 layers lands within a few
# hundredths of the fp32 value; a leak across packed sequences moves it by whole nats.
BF16_LOGPROB_TOLERANCE = 0.1


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not torch.cuda.is_available():
        pytest.fail("the GPU tests need a CUDA device: run them with `make test-gpu` on one")
    config = transformers.Qwen2Config(
        vocab_size=1024,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gpu") / "model"
    transformers.Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def agent_batch() -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    lengths = [700, 64, 333, 1024, 9]
    tokens = [torch.randint(3, 1024, (n,), generator=g).tolist() for n in lengths]
    masks = [[0] * (n // 3) + [1] * (n - n // 3) for n in lengths]
    return TrainBatch.collate(tokens, masks, [[0.0] * n for n in lengths], [1.0] * len(lengths))


def test_packed_bf16_logprobs_on_the_varlen_kernel_match_fp32_padded_ones(
    model_path: Path,
) -> None:
    assert _varlen_kernel() is not None, f"torch {torch.__version__} has no varlen attention"
    load = transformers.AutoModelForCausalLM.from_pretrained
    reference = load(model_path, dtype=torch.float32).cuda()
    policy = PolicyModel(load(model_path, dtype=torch.bfloat16).cuda(), 256)
    b = agent_batch()
    packed = MicroBatch.of(b, "cuda").packed
    got = packed_logprobs(policy, packed)
    b = b.to("cuda")
    with torch.no_grad():
        logits = reference(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        want = token_logprobs(logits, b.input_ids) * b.loss_mask
    assert float((got.detach() - want).abs().max()) < BF16_LOGPROB_TOLERANCE
    got.sum().backward()
    grads = torch.cat([p.grad.float().flatten() for p in policy.parameters()])
    padded = load(model_path, dtype=torch.bfloat16).cuda()
    logits = padded(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    (token_logprobs(logits, b.input_ids) * b.loss_mask).sum().backward()
    want_grads = torch.cat([p.grad.float().flatten() for p in padded.parameters()])
    assert torch.nn.functional.cosine_similarity(grads, want_grads, dim=0) > 0.99


def test_a_learner_step_with_token_budget_micro_batches_learns_on_the_gpu(
    model_path: Path,
) -> None:
    from agenthub.trainer import Learner, LearnerConfig

    config = LearnerConfig(zero_stage=2, lr=1e-3, max_tokens_per_micro_batch=1024)
    learner = Learner(model_path, config)
    b = agent_batch()
    mask = b.loss_mask.cuda()
    before = packed_logprobs(learner.engine.module, MicroBatch.of(b, "cuda").packed).detach()
    for _ in range(3):
        metrics = learner.step(b)
    after = packed_logprobs(learner.engine.module, MicroBatch.of(b, "cuda").packed).detach()
    assert float(((after - before) * mask).sum()) > 0, "advantage 1 everywhere: more likely"
    assert metrics["grad_norm"] > 0 and all(v == v for v in metrics.values())
