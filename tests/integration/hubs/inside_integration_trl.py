"""TRL's own `GRPOTrainer` trains the embedded default model 2 steps on CPU on agenthub's
`math`, through `agenthub.integrations.trl`, inside a venv with TRL
(test_integration_trl.py); the rewards TRL logs are the env's."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from agenthub.agents.default_model import ensure_default_model
from agenthub.integrations.trl import EnvReward, train_dataset

pytestmark = [pytest.mark.integration]


class Recorded(EnvReward):
    """The env's rewards, as they leave agenthub for TRL."""

    def __init__(self, env_id: str) -> None:
        super().__init__(env_id)
        self.calls: list[list[float]] = []

    async def __call__(self, prompts: Any, completions: Any, **kwargs: Any) -> list[float]:
        rewards = await super().__call__(prompts, completions, **kwargs)
        self.calls.append(rewards)
        return rewards


def test_grpo_trainer_takes_two_steps_on_math(tmp_path: Path) -> None:
    from trl import GRPOTrainer

    reward = Recorded("math")
    config = two_cpu_steps(tmp_path, max_completion_length=24)
    trainer = GRPOTrainer(
        model=str(ensure_default_model()),
        reward_funcs=[reward],
        args=config,
        train_dataset=train_dataset("math", num_examples=8),
    )
    trainer.train()
    logged = [e for e in trainer.state.log_history if "rewards/agenthub_math/mean" in e]
    assert trainer.state.global_step == 2 and len(logged) == 2 == len(reward.calls)
    for entry, rewards in zip(logged, reward.calls, strict=True):
        assert len(rewards) == 4 and set(rewards) <= {0.0, 1.0}
        assert entry["rewards/agenthub_math/mean"] == pytest.approx(statistics.mean(rewards))


def two_cpu_steps(output_dir: Path, max_completion_length: int) -> Any:
    """TRL's `GRPOConfig` for 2 steps on the CPU: 4 prompts of 4 generations, nothing saved."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(output_dir),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=max_completion_length,
        learning_rate=1e-5,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
