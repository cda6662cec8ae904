"""`agenthub train` on an adapter to another hub, end to end on the embedded default model:
reasoning-gym's tasks come from the adapter's own `tasks(split)`, with no task file, through
the Ray rollout worker, vLLM and the DeepSpeed learner, for three steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..trainer.test_train_cli import _complete, _records, _trained_steps

pytestmark = [pytest.mark.integration, pytest.mark.smoke]

# The smallest run the config allows: one group of two episodes a step. The tiny model gets
# most sums wrong, so groups are kept even when their scores are all equal.
SMALLEST = [
    "rollout.n_samples_per_prompt=2",
    "rollout.concurrency=2",
    "rollout.max_reply_tokens=32",
    "algorithm.batch_groups=1",
    "algorithm.filter_groups=false",
    "eval.every=0",
    "run.checkpoint_every=3",
    "run.save_model=false",
    "run.wandb=disabled",
]


@pytest.mark.timeout(900)
def test_train_runs_three_steps_on_reasoning_gym(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = ["--env", "reasoning_gym", "env_kwargs.dataset=basic_arithmetic", "env_kwargs.size=8"]
    done = _complete(out, *env, "--steps", "3", *SMALLEST)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _trained_steps(out) == [1, 2, 3]
    assert json.loads(done.stdout)["steps"] == 3, done.stdout[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert config["env_kwargs"] == {"dataset": "basic_arithmetic", "size": 8}
    for record in (r for r in _records(out) if "train/reward" in r):
        assert 0.0 <= record["train/reward"] <= 1.0
        assert "train/extra/score_answer" in record, "the adapter's extra_logs are logged"
    samples = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 2, "run.save_trajectories keeps up to 4 of each step's 2"
    for t in samples:
        assert t["env"] == "reasoning_gym" and t["error"] is None, t["error"]
        assert t["task_id"].startswith("basic_arithmetic/train/"), t["task_id"]
        assert t["num_turns"] == 1 and t["score"] in (0.0, 1.0)
