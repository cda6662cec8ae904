"""`agenthub.integrations.trl.EnvReward` as TRL calls it (TRL's own `GRPOTrainer` runs it in
tests/integration/hubs/test_integration_trl.py)."""

from __future__ import annotations

import pytest

import agenthub
from agenthub.integrations.trl import EnvReward

pytestmark = pytest.mark.anyio


async def test_each_completion_is_played_through_the_env() -> None:
    tasks = list(agenthub.make("math").tasks("train"))[:2]
    columns = [t.model_dump_json() for t in tasks]
    right = [{"role": "assistant", "content": f"\\boxed{{{tasks[0].label}}}"}]
    rewards = await EnvReward("math")(
        prompts=["p", "p"], completions=[right, "\\boxed{-1}"], agenthub_task=columns
    )
    assert rewards == [1.0, 0.0]
    assert EnvReward("math").__name__ == "agenthub_math"


async def test_without_the_task_column_it_says_which_dataset_to_build() -> None:
    with pytest.raises(ValueError, match="agenthub.integrations.trl.train_dataset"):
        await EnvReward("math")(prompts=["p"], completions=["x"])
