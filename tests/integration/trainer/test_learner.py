"""The DeepSpeed learner on CPU (gloo) with a tiny Qwen2 built locally."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the learner needs the train extra")
pytest.importorskip("deepspeed", reason="the learner needs the train extra")

from agenthub.trainer import Learner, LearnerConfig, TrainBatch, token_logprobs  # noqa: E402
from agenthub.trainer._learner import MODEL_CHECKPOINT  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PROMPT = [5, 6, 7, 8]
GOOD = [20, 21, 22, 23, 24]
BAD = [30, 31, 32, 33, 34]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    path = tmp_path_factory.mktemp("tiny") / "model"
    Qwen2ForCausalLM(config).save_pretrained(path)
    yield path


def batch(learner: Learner | None, model_path: Path, advantages: list[float]) -> TrainBatch:
    tokens = [PROMPT + GOOD, PROMPT + BAD]
    masks = [[0] * len(PROMPT) + [1] * len(GOOD)] * 2
    plain = TrainBatch.collate(tokens, masks, [[0.0] * 9] * 2, advantages)
    rollout = response_logprobs(learner, model_path, plain)
    return TrainBatch.collate(tokens, masks, rollout.tolist(), advantages)


def response_logprobs(learner: Learner | None, model_path: Path, b: TrainBatch) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path)
    if learner is not None:
        model.load_state_dict(learner.state_dict())
    with torch.no_grad():
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
    return token_logprobs(logits, b.input_ids) * b.loss_mask


@pytest.mark.parametrize("zero_stage", [0, 3])
def test_steps_raise_good_and_lower_bad_sequences(tiny_model: Path, zero_stage: int) -> None:
    # At 1e-2 this two-layer model's logprobs swing back and forth from the fourth step on (in
    # fp32 too), and bf16 (the default on a GPU) shifts the swing by a step: 3e-3 climbs steadily.
    config = LearnerConfig(zero_stage=zero_stage, lr=3e-3, micro_batch_size=1)
    learner = Learner(tiny_model, config)
    before = batch(learner, tiny_model, [1.0, -1.0])
    for _ in range(4):
        metrics = learner.step(batch(learner, tiny_model, [1.0, -1.0]))
    after = response_logprobs(learner, tiny_model, before)
    good_gain = float((after[0] - before.rollout_logprobs[0]).sum())
    bad_gain = float((after[1] - before.rollout_logprobs[1]).sum())
    assert good_gain > 0.5 and bad_gain < -0.5
    assert {"loss", "clip_fraction", "is_clipped", "is_masked", "grad_norm"} <= set(metrics)
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert learner.steps == 4


def test_bf16_is_used_where_the_hardware_computes_it_and_fp32_elsewhere(tiny_model: Path) -> None:
    learner = Learner(tiny_model, LearnerConfig(zero_stage=0))
    on_gpu = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    expected = torch.bfloat16 if on_gpu else torch.float32
    assert {p.dtype for p in learner.engine.module.parameters()} == {expected}
    assert learner.engine.device.type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("zero_stage", [0, 3])
def test_a_bf16_step_is_the_fp32_step_to_bf16_precision(tiny_model: Path, zero_stage: int) -> None:
    def learner(bf16: bool) -> Learner:
        config = LearnerConfig(zero_stage=zero_stage, bf16=bf16, lr=3e-3, micro_batch_size=1)
        return Learner(tiny_model, config)

    half, full = learner(True), learner(False)
    start = full.state_dict()
    b = batch(None, tiny_model, [1.0, -1.0])
    half.step(b)
    full.step(b)
    weights = half.state_dict()
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}, "engines get bf16 weights"
    moved = torch.cat([(weights[k].float() - start[k]).flatten() for k in start])
    expected = torch.cat([(full.state_dict()[k] - start[k]).flatten() for k in start])
    assert torch.nn.functional.cosine_similarity(moved, expected, dim=0) > 0.95
    for _ in range(3):
        half.step(batch(half, tiny_model, [1.0, -1.0]))
    after = response_logprobs(half, tiny_model, b)
    assert float((after[0] - b.rollout_logprobs[0]).sum()) > 0.5
    assert float((after[1] - b.rollout_logprobs[1]).sum()) < -0.5


def test_a_learner_in_this_process_leaves_no_port_for_children_to_inherit(
    tiny_model: Path,
) -> None:
    # A port in the environment made every `agenthub train` started from a process that had
    # built a Learner try to listen on the port that process still held (EADDRINUSE).
    Learner(tiny_model, LearnerConfig(zero_stage=0))
    assert torch.distributed.is_initialized()
    assert "MASTER_PORT" not in os.environ and "MASTER_ADDR" not in os.environ


def test_a_fresh_learner_compiles_no_ops(tiny_model: Path, tmp_path: Path) -> None:
    # DeepSpeed's FusedAdam and its CPU shared-memory all-reduce are C++ ops built on first use
    # (78 s of start-up on a 2-core machine, and a CUDA toolkit on a GPU one). A fresh process
    # with an empty extension cache shows whether anything was built.
    cache = tmp_path / "torch_extensions"
    code = (
        "import sys; from agenthub.trainer import LearnerConfig, Learner; "
        "Learner(sys.argv[1], LearnerConfig(zero_stage=2)); print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tiny_model)],
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
    built = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert built == []


def test_zero_stages_take_the_same_first_step(tiny_model: Path) -> None:
    results = []
    for stage in (0, 2, 3):
        config = LearnerConfig(zero_stage=stage, bf16=False, lr=1e-3, micro_batch_size=2)
        learner = Learner(tiny_model, config)
        metrics = learner.step(batch(None, tiny_model, [1.0, -1.0]))
        results.append((metrics["loss"], metrics["grad_norm"], learner.state_dict()))
    (loss0, norm0, sd0), *others = results
    assert norm0 > 0
    for loss, norm, sd in others:
        assert loss == pytest.approx(loss0, rel=1e-5)
        assert norm == pytest.approx(norm0, rel=1e-4)
        assert sd.keys() == sd0.keys()
        for key in sd0:
            torch.testing.assert_close(sd[key], sd0[key], atol=1e-5, rtol=1e-4)


def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny_model: Path) -> None:
    states = []
    for micro in (1, 2):
        learner = Learner(
            tiny_model,
            LearnerConfig(
                zero_stage=0,
                bf16=False,
                lr=1e-3,
                micro_batch_size=micro,
                aggregation="seq-mean-token-mean",
            ),
        )
        learner.step(batch(None, tiny_model, [1.0, -0.5]))
        states.append(learner.state_dict())
    for key in states[0]:
        torch.testing.assert_close(states[0][key], states[1][key], atol=1e-5, rtol=1e-4)


def test_off_policy_tokens_are_corrected_and_reported(tiny_model: Path) -> None:
    learner = Learner(
        tiny_model,
        LearnerConfig(zero_stage=0, importance_mode="icepop", micro_batch_size=2, kl_coef=0.1),
    )
    b = batch(None, tiny_model, [1.0, -1.0])
    stale = TrainBatch(
        b.input_ids,
        b.attention_mask,
        b.loss_mask,
        b.rollout_logprobs - 3.0 * b.loss_mask,
        b.advantages,
    )
    metrics = learner.step(stale)
    assert metrics["is_masked"] == pytest.approx(1.0), "every token is e^3 off: all masked"
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-6), "policy equals reference at step 0"


def test_checkpoint_round_trip_restores_weights_and_step(tiny_model: Path, tmp_path: Path) -> None:
    learner = Learner(tiny_model, LearnerConfig(zero_stage=2, lr=1e-2, micro_batch_size=2))
    learner.step(batch(None, tiny_model, [1.0, -1.0]))
    learner.save_checkpoint(tmp_path / "ckpt", tag="step-1")
    saved = learner.state_dict()
    learner.step(batch(None, tiny_model, [1.0, -1.0]))

    restored = Learner(tiny_model, LearnerConfig(zero_stage=2, lr=1e-2, micro_batch_size=2))
    restored.load_checkpoint(tmp_path / "ckpt")
    assert restored.steps == 1
    for key, value in restored.state_dict().items():
        torch.testing.assert_close(value, saved[key])
    with pytest.raises(FileNotFoundError, match="no learner checkpoint"):
        restored.load_checkpoint(tmp_path / "empty")


def test_later_epochs_clip_against_the_policy_the_batch_started_from(tiny_model: Path) -> None:
    one = Learner(tiny_model, LearnerConfig(zero_stage=0, lr=5e-2, micro_batch_size=1))
    first = one.step(batch(None, tiny_model, [1.0, -1.0]))
    assert first["clip_fraction"] == 0.0, "a single epoch never moves away from `old`"
    several = Learner(
        tiny_model,
        LearnerConfig(zero_stage=0, lr=5e-2, micro_batch_size=1, epochs=3, eps_low=0.01),
    )
    metrics = several.step(batch(None, tiny_model, [1.0, -1.0]))
    assert metrics["clip_fraction"] > 0.0, "epochs 2 and 3 see ratios outside [0.99, 1.28]"
    assert several.steps == 1, "steps count batches, not optimiser steps"


def test_kl_as_reward_penalty_is_a_per_token_advantage(tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM

    from agenthub.trainer import kl_divergence

    drift = Learner(tiny_model, LearnerConfig(zero_stage=0, lr=5e-2, micro_batch_size=2))
    drift.step(batch(None, tiny_model, [1.0, -1.0]))
    moved = drift.state_dict()
    b = batch(None, tiny_model, [0.5, -0.5])
    penalised = Learner(
        tiny_model,
        LearnerConfig(
            zero_stage=0, bf16=False, lr=1e-2, micro_batch_size=2, kl_coef=0.5, kl_mode="reward"
        ),
    )
    penalised.engine.module.load_state_dict(moved)
    metrics = penalised.step(b)

    # The same step by hand: advantages lowered per token by 0.5 * KL(moved || reference),
    # computed on the learner's device and by the learner's own packed forward pass (a CPU sum
    # differs in its last bits from a GPU one, and a padded forward from a packed one, which
    # flips Adam's first update of a weight whose gradient is near zero).
    from agenthub.trainer._logprobs import PolicyModel, packed_logprobs
    from agenthub.trainer._packing import pack

    device = penalised.engine.device
    b = b.to(device)
    packed = pack(b.input_ids.cpu(), b.attention_mask.cpu(), b.loss_mask.cpu()).to(device)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model).to(device)
    model = AutoModelForCausalLM.from_pretrained(tiny_model).to(device)
    model.load_state_dict(moved)
    with torch.no_grad():
        new = packed_logprobs(PolicyModel(model, 1024), packed)
        ref = packed_logprobs(PolicyModel(reference, 1024), packed)
    kl = kl_divergence(new, ref, b.loss_mask, "k3")
    by_hand = TrainBatch(
        b.input_ids,
        b.attention_mask,
        b.loss_mask,
        b.rollout_logprobs,
        b.advantages[:, None] - 0.5 * kl,
    )
    plain = Learner(
        tiny_model, LearnerConfig(zero_stage=0, bf16=False, lr=1e-2, micro_batch_size=2)
    )
    plain.engine.module.load_state_dict(moved)
    plain.step(by_hand)
    assert metrics["kl"] > 0
    after, expected = penalised.state_dict(), plain.state_dict()
    for key in expected:
        torch.testing.assert_close(after[key], expected[key], atol=1e-5, rtol=1e-4)


def test_ppo_with_a_critic_learns_values_and_moves_the_policy(
    tiny_model: Path, tmp_path: Path
) -> None:
    from agenthub.trainer import CriticConfig

    config = LearnerConfig(
        zero_stage=2, lr=1e-2, micro_batch_size=1, critic=CriticConfig(lr=3e-3, value_clip=0)
    )
    learner = Learner(tiny_model, config)
    assert learner.critic is not None
    before = batch(learner, tiny_model, [0.0, 0.0])
    losses = []
    for _ in range(8):
        b = batch(learner, tiny_model, [0.0, 0.0])
        metrics = learner.step(replace(b, rewards=torch.tensor([1.0, 0.0])))
        losses.append(metrics["critic/value_loss"])
    after = response_logprobs(learner, tiny_model, before)
    assert float((after[0] - before.rollout_logprobs[0]).sum()) > 0.5, "rewarded: more likely"
    assert float((after[1] - before.rollout_logprobs[1]).sum()) < -0.5, "unrewarded: less"
    assert min(losses[-3:]) < 0.5 * losses[0], losses
    from agenthub.trainer._batch import MicroBatch

    packed = MicroBatch.of(before, learner.engine.device)
    with torch.no_grad():
        values = learner.critic.values(packed)
    # After its shared first token, the rewarded reply's states are worth more.
    good, bad = float(values[0, -3:].mean()), float(values[1, -3:].mean())
    assert good > bad + 0.4, (good, bad)
    assert {"loss", "critic/value_loss", "critic/value_mean"} <= set(metrics)

    learner.save_checkpoint(tmp_path / "ckpt", tag="step-6")
    restored = Learner(tiny_model, config)
    restored.load_checkpoint(tmp_path / "ckpt", "step-6")
    assert restored.critic is not None
    with torch.no_grad():
        torch.testing.assert_close(restored.critic.values(packed), learner.critic.values(packed))


def test_the_policy_is_saved_as_a_hugging_face_model_under_zero_3(
    tiny_model: Path, tmp_path: Path
) -> None:
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.tiny_model import build_tokenizer

    source = tmp_path / "source"
    shutil.copytree(tiny_model, source)
    build_tokenizer(source)
    learner = Learner(source, LearnerConfig(zero_stage=3, lr=1e-2, micro_batch_size=2))
    learner.save_model(tmp_path / "model")
    learner.step(batch(None, tiny_model, [1.0, -1.0]))
    learner.save_model(tmp_path / "model", {"step": 1})  # replaces the first in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "source"]
    assert json.loads((tmp_path / "model" / MODEL_CHECKPOINT).read_text()) == {"step": 1}
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "model").state_dict()
    trained = learner.state_dict()
    assert saved.keys() == trained.keys()
    for key, value in trained.items():
        torch.testing.assert_close(saved[key], value)
    start = AutoModelForCausalLM.from_pretrained(source).state_dict()
    assert any(not torch.equal(saved[k], start[k]) for k in start), "the trained step is saved"
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(source).chat_template


def test_the_gap_is_reported_for_current_and_stale_tokens(tiny_model: Path) -> None:
    learner = Learner(tiny_model, LearnerConfig(zero_stage=0, bf16=False, micro_batch_size=1))
    b = batch(learner, tiny_model, [1.0, -1.0])
    # Row 0 sampled by the learner's own policy (version 0), row 1 by an older one whose
    # logprobs were 0.5 lower on every reply token.
    versions = torch.tensor([[0] * 9, [-1] * 9])
    rollout = b.rollout_logprobs - 0.5 * b.loss_mask * torch.tensor([[0.0], [1.0]])
    metrics = learner.step(replace(b, rollout_logprobs=rollout, policy_versions=versions))
    assert metrics["gap/current_max"] < 1e-4, "the same weights, the same fp32 logprobs"
    assert metrics["gap/stale_mean"] == pytest.approx(0.5, abs=1e-4)
    assert metrics["gap/stale_tokens"] == pytest.approx(0.5)
    assert metrics["gap/mean"] == pytest.approx(0.25, abs=1e-4)
    assert metrics["is_clipped"] == 0.0 and metrics["is_masked_sequences"] == 0.0


def test_the_adaptive_kl_weight_moves_each_step_and_is_checkpointed(
    tiny_model: Path, tmp_path: Path
) -> None:
    config = LearnerConfig(
        zero_stage=0, lr=1e-2, micro_batch_size=2, kl_coef=0.1, kl_target=1e-6, kl_horizon=10
    )
    learner = Learner(tiny_model, config)
    first = learner.step(batch(None, tiny_model, [1.0, -1.0]))
    assert first["kl_coef"] == 0.1 and first["kl"] == pytest.approx(0.0, abs=1e-6)
    assert learner.kl.value == pytest.approx(0.1 * (1 - 0.2 * 2 / 10)), "KL 0: below target"
    second = learner.step(batch(None, tiny_model, [1.0, -1.0]))
    assert second["kl"] > 1e-6, "moved from the reference: above target"
    assert learner.kl.value == pytest.approx(second["kl_coef"] * (1 + 0.2 * 2 / 10))
    learner.save_checkpoint(tmp_path / "ckpt", tag="step-2")
    restored = Learner(tiny_model, config)
    restored.load_checkpoint(tmp_path / "ckpt")
    assert restored.kl.value == pytest.approx(learner.kl.value)
