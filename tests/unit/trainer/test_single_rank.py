"""The learner's engine for one rank: the update a hand-written loop makes, its checkpoints,
and a checkpoint of DeepSpeed's for one rank read back."""

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.trainer._learner import check_checkpoint_ranks  # noqa: E402
from agenthub.trainer._single_rank import SINGLE_RANK_STATE, SingleRankEngine  # noqa: E402


def engine(dtype: torch.dtype = torch.float32, seed: int = 0) -> SingleRankEngine:
    torch.manual_seed(seed)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    return SingleRankEngine(
        module.to(dtype), lr=0.1, weight_decay=0.01, grad_clip=0.5, device=torch.device("cpu")
    )


def learn(e: SingleRankEngine, micro_batches: int = 2) -> None:
    g = torch.Generator().manual_seed(1)
    for n in range(micro_batches):
        x = torch.randn(3, 4, generator=g).to(next(e.module.parameters()).dtype)
        e.set_gradient_accumulation_boundary(n == micro_batches - 1)
        e.backward(e(x).float().pow(2).sum())
    e.step()


def test_a_step_is_adamw_on_the_clipped_accumulated_gradients() -> None:
    e = engine()
    hand = engine()
    optimizer = torch.optim.AdamW(hand.module.parameters(), lr=0.1, weight_decay=0.01)
    learn(e)
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        hand.module(torch.randn(3, 4, generator=g)).pow(2).sum().backward()
    norm = torch.nn.utils.clip_grad_norm_(hand.module.parameters(), 0.5)
    optimizer.step()
    assert e.get_global_grad_norm() == pytest.approx(float(norm))
    for got, want in zip(e.module.parameters(), hand.module.parameters(), strict=True):
        torch.testing.assert_close(got, want)


def test_bf16_weights_are_stepped_through_fp32_master_weights() -> None:
    e = engine(torch.bfloat16)
    assert {m.dtype for m in e.master} == {torch.float32}
    learn(e)
    for master, p in zip(e.master, e.params, strict=True):
        assert p.dtype == torch.bfloat16 and p.grad is None
        torch.testing.assert_close(p, master.to(torch.bfloat16))


def test_a_checkpoint_restores_weights_master_weights_and_optimizer(tmp_path: Path) -> None:
    e = engine(torch.bfloat16)
    learn(e)
    e.save_checkpoint(str(tmp_path), "step-1", {"steps": 1})
    assert (tmp_path / "latest").read_text() == "step-1"
    restored = engine(torch.bfloat16, seed=7)
    path, client = restored.load_checkpoint(str(tmp_path), "step-1")
    assert path == str(tmp_path / "step-1" / SINGLE_RANK_STATE) and client == {"steps": 1}
    learn(e)
    learn(restored)
    for got, want in zip(restored.master, e.master, strict=True):
        torch.testing.assert_close(got, want)
    assert restored.load_checkpoint(str(tmp_path), "step-9") == (None, {})


def test_a_checkpoint_of_one_rank_is_refused_by_more_ranks(tmp_path: Path) -> None:
    engine().save_checkpoint(str(tmp_path), "step-1")
    check_checkpoint_ranks(tmp_path / "step-1", 1)
    with pytest.raises(ValueError, match="saved by a learner of 1 ranks.*learner_ranks=1"):
        check_checkpoint_ranks(tmp_path / "step-1", 2)


@pytest.mark.integration
def test_deepspeeds_checkpoint_of_one_rank_gives_its_weights_and_step(tmp_path: Path) -> None:
    deepspeed = pytest.importorskip("deepspeed", reason="the learner needs the train extra")
    from agenthub.trainer._ranks import join_alone

    join_alone()
    e = engine()
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 0.1, "torch_adam": True}},
        "zero_optimization": {"stage": 2},
    }
    module = engine(seed=3).module
    ds, *_ = deepspeed.initialize(model=module, config=config, model_parameters=module.parameters())
    ds.save_checkpoint(str(tmp_path), tag="step-4", client_state={"steps": 4, "kl_coef": 0.1})
    with pytest.warns(UserWarning, match="optimizer moments start anew"):
        path, client = e.load_checkpoint(str(tmp_path), "step-4")
    assert path is not None and client == {"steps": 4, "kl_coef": 0.1}
    for got, want in zip(e.module.parameters(), ds.module.parameters(), strict=True):
        torch.testing.assert_close(got, want)
