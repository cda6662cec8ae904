"""TRL's own `GRPOTrainer` trains the embedded default model 2 steps on CPU on a multi-turn
agenthub env (`math` with a second attempt after a wrong answer) through
`agenthub.integrations.trl.EnvRollout`, inside a venv with TRL
(test_integration_trl.py); the rewards TRL logs are the episodes'."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from agenthub.agents.default_model import ensure_default_model
from agenthub.integrations.trl import EnvRollout

from .inside_integration_trl import two_cpu_steps

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


class Recorded(EnvRollout):
    """The episodes as they leave agenthub for TRL."""

    def __init__(self, env_id: str, **env_kwargs: Any) -> None:
        super().__init__(env_id, **env_kwargs)
        self.outputs: list[dict[str, list[Any]]] = []

    def __call__(self, prompts: Any, trainer: Any) -> dict[str, list[Any]]:
        output = super().__call__(prompts, trainer)
        self.outputs.append(output)
        return output


def test_grpo_trainer_takes_two_steps_on_a_multi_turn_env(tmp_path: Path) -> None:
    from trl import GRPOTrainer

    from agenthub.integrations.trl import env_reward

    rollout = Recorded("math", max_attempts=2, max_turns=2, max_reply_tokens=24)
    config = two_cpu_steps(tmp_path, max_completion_length=128)
    trainer = GRPOTrainer(
        model=str(ensure_default_model()),
        reward_funcs=[env_reward],
        args=config,
        train_dataset=rollout.train_dataset(num_examples=8),
        rollout_func=rollout,
    )
    trainer.train()
    logged = [e for e in trainer.state.log_history if "rewards/env_reward/mean" in e]
    assert trainer.state.global_step == 2 and len(logged) == 2 == len(rollout.outputs)
    for entry, output in zip(logged, rollout.outputs, strict=True):
        rewards = output["env_reward"]
        assert len(rewards) == 4 and set(rewards) <= {0.0, 1.0}
        assert entry["rewards/env_reward/mean"] == pytest.approx(statistics.mean(rewards))
        for mask, ids, logprobs in zip(
            output["env_mask"], output["completion_ids"], output["logprobs"], strict=True
        ):
            assert len(mask) == len(ids) == len(logprobs) and mask[0] == 1
    # A wrong first answer gets the env's feedback (mask 0) and a second reply (mask 1).
    masks = [m for output in rollout.outputs for m in output["env_mask"]]
    assert any(0 in m and m[m.index(0) :].count(1) for m in masks), masks
