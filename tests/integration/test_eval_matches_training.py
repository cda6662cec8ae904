"""`agenthub eval` and the trainer's held-out evaluation give the same reward for the same model,
tasks, seeds and sampling: the embedded default model through real vLLM, once by the command
and once by a rollout worker as a training run starts it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agenthub.agents import EvalSummary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

TASKS, SAMPLES, TEMPERATURE, REPLY_TOKENS = 3, 2, 1.0, 48


def test_eval_and_the_trainer_s_held_out_evaluation_give_the_same_reward(tmp_path: Path) -> None:
    from agenthub.agents.default_model import ensure_default_model
    from agenthub.trainer._config import TrainConfig
    from agenthub.trainer._workers import RolloutWorker

    model = ensure_default_model()
    command = [
        sys.executable, "-m", "agenthub", "eval", "--env", "math", "--model", str(model),
        "--split", "held_out", "-n", str(TASKS), "-k", str(SAMPLES),
        "--temperature", str(TEMPERATURE), "--seed", "0",
        "--max-reply-tokens", str(REPLY_TOKENS), "--concurrency", str(TASKS * SAMPLES),
        "--out", str(tmp_path / "eval"),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    evaluated = EvalSummary.model_validate_json((tmp_path / "eval" / "summary.json").read_text())

    # The trainer's settings for the same sampling; its engine as large as eval's, so both
    # batch the same requests together.
    config = TrainConfig.model_validate(
        {
            "env": "math",
            "model": str(model),
            "rollout": {"max_reply_tokens": REPLY_TOKENS, "concurrency": TASKS * SAMPLES},
            "eval": {"tasks": TASKS, "samples_per_task": SAMPLES, "temperature": TEMPERATURE},
        }
    )

    async def held_out() -> EvalSummary:
        worker = RolloutWorker(config.model_dump(mode="json"), str(model), 0, None, None)
        await worker.start()
        try:
            return await worker.evaluate(TASKS, "held_out", TEMPERATURE, SAMPLES)
        finally:
            await worker.close()

    trained = asyncio.run(held_out())
    same = ("episodes", "tasks", "mean_reward", "mean_score", "pass_at_k", "errors", "tokens")
    assert evaluated.episodes == TASKS * SAMPLES and not evaluated.errors
    assert trained.model_dump(include=set(same)) == evaluated.model_dump(include=set(same)), (
        json.dumps([trained.model_dump(), evaluated.model_dump()], indent=1)
    )
    # What the trainer logs and reports as the held-out reward: the same number.
    from agenthub.trainer._evaluation import evaluated_record, held_out_reward

    assert held_out_reward(trained) == evaluated.mean_reward
    assert evaluated_record(trained, 0)["eval/reward"] == evaluated.mean_reward
