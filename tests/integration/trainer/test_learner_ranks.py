"""A learner of two data-parallel ranks, started as Ray actors as a training run starts them
(`LearnerGroup`), against one rank: the same step, an exact resume, and the refusals.

The model is the embedded default's architecture (Qwen2, 3.5M parameters) freshly
initialised: the step's arithmetic is what is compared, not what the model knows. The two
ranks reduce over gloo on this machine's CPU.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the learner needs the train extra")
pytest.importorskip("deepspeed", reason="the learner needs the train extra")
pytest.importorskip("ray", reason="the learner's ranks are Ray actors")

from agenthub._errors import AgentHubError  # noqa: E402
from agenthub.trainer import Learner, TrainBatch  # noqa: E402
from agenthub.trainer._config import TrainConfig  # noqa: E402
from agenthub.trainer._learner_group import LearnerGroup  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOLERANCE = 1e-4
"""Largest weight difference allowed between one and two ranks after one AdamW step of lr 1e-3
(a tenth of the step). Both take the same micro-batches with the same weights; only the order
of the fp32 sums differs (gloo adds the two ranks' gradients, one rank adds them as it goes).
The first AdamW step moves each weight by lr * g / (|g| + eps), which turns such rounding into
a visible difference only where a gradient is near eps. Measured on a 2-core CPU: largest
1.7e-5 (ZeRO-3) to 4.6e-5 (ZeRO-2), mean 2e-10, and 3e-5 to 4e-5 of the weights (about 100
of 3.5M) more than 1e-6 apart."""

STRAYS = 1e-4
"""Share of the weights allowed to differ by more than a thousandth of the step (1e-6)."""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agenthub.agents.default_model._config import DefaultModelConfig

    d = DefaultModelConfig()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=d.vocab_size,
        hidden_size=d.hidden_size,
        intermediate_size=d.intermediate_size,
        num_hidden_layers=d.num_layers,
        num_attention_heads=d.num_heads,
        num_key_value_heads=d.num_kv_heads,
        head_dim=d.hidden_size // d.num_heads,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    path = tmp_path_factory.mktemp("default-architecture") / "model"
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def ray_cpus() -> Iterator[None]:
    import ray

    ray.init(num_cpus=3, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def batch(seed: int) -> TrainBatch:
    """Seven sequences of very different lengths, with per-sequence advantages: micro-batches
    of three hold 141, 52 and 5 tokens, so one rank takes the first and the other the two
    others, the first rank then running an idle micro-batch to keep in step."""
    g = torch.Generator().manual_seed(seed)
    lengths = [60, 9, 33, 17, 48, 5, 26]
    tokens = [torch.randint(3, 4000, (n,), generator=g).tolist() for n in lengths]
    masks = [[0] * 3 + [1] * (n - 3) for n in lengths]
    logprobs = [[0.0] * 3 + (-torch.rand(n - 3, generator=g) * 8).tolist() for n in lengths]
    advantages = torch.randn(len(lengths), generator=g).tolist()
    rewards = torch.rand(len(lengths), generator=g).tolist()  # for the critic's returns
    return TrainBatch.collate(tokens, masks, logprobs, advantages, rewards=rewards)


def settings(zero_stage: int, ranks: int, estimator: str = "group_norm") -> TrainConfig:
    """`estimator="gae"` adds the critic, whose advantages replace the batch's."""
    return TrainConfig(
        env="math",
        algorithm={"estimator": estimator},
        learner={"zero_stage": zero_stage, "lr": 1e-3, "micro_batch_size": 3},
        ray={"learner_ranks": ranks},
    )


def largest_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def share_apart(a: dict[str, Any], b: dict[str, Any], above: float) -> float:
    flat = torch.cat([(a[k].float() - b[k].float()).abs().flatten() for k in a])
    return float((flat > above).float().mean())


def one_rank_step(model: Path, cfg: TrainConfig) -> tuple[dict[str, Any], float]:
    """The weights after one step of one rank, and the largest change the step made."""
    torch.manual_seed(cfg.run.seed)  # as each rank does: the critic's value head is new
    learner = Learner(model, cfg.learner)
    before = learner.state_dict()
    learner.step(batch(1))
    after = learner.state_dict()
    return after, largest_difference(before, after)


# ZeRO-2 with the group-normalised advantages; ZeRO-3, whose parameters are partitioned across
# the ranks, with the critic too (its value head partitioned beside the policy).
@pytest.mark.parametrize(("zero_stage", "estimator"), [(2, "group_norm"), (3, "gae")])
def test_two_ranks_take_the_step_of_one_and_resume_exactly(
    model: Path, ray_cpus: None, zero_stage: int, estimator: str, tmp_path: Path
) -> None:
    expected, moved = one_rank_step(model, settings(zero_stage, 1, estimator))
    assert moved > 1e-4  # the step moved the weights

    async def run() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        group = LearnerGroup(settings(zero_stage, 2, estimator), model)
        try:
            await group.start()
            await group.step(batch(1))
            stepped = await group.state_dict()
            await group.save_checkpoint(tmp_path, "step1")
            await group.step(batch(2))
            uninterrupted = await group.state_dict()
        finally:
            group.kill()
        resumed_group = LearnerGroup(settings(zero_stage, 2, estimator), model)
        try:
            await resumed_group.start()
            assert await resumed_group.load_checkpoint(tmp_path, "step1") == 1
            await resumed_group.step(batch(2))
            resumed = await resumed_group.state_dict()
        finally:
            resumed_group.kill()
        return stepped, uninterrupted, resumed

    stepped, uninterrupted, resumed = asyncio.run(run())
    difference = largest_difference(stepped, expected)
    strays = share_apart(stepped, expected, 1e-6)
    print(f"ZeRO-{zero_stage}, {estimator}: 2 ranks against 1, largest difference {difference:.2e}")
    print(f"ZeRO-{zero_stage}, {estimator}: share of the weights over 1e-6 apart {strays:.2e}")
    assert difference <= TOLERANCE and strays <= STRAYS
    assert largest_difference(uninterrupted, resumed) == 0.0
    # The checkpoint holds one optimizer shard per rank; one rank refuses it, saying why.
    learner = Learner(model, settings(zero_stage, 1, estimator).learner)
    with pytest.raises(ValueError, match="saved by a learner of 2 ranks.*learner_ranks=2"):
        learner.load_checkpoint(tmp_path, "step1")


def test_more_ranks_than_the_cluster_holds_are_refused(model: Path, ray_cpus: None) -> None:
    with pytest.raises(AgentHubError, match=r"learner_ranks=4 needs 4 CPUs .* has 3.*at most 3"):
        LearnerGroup(settings(2, 4), model)
