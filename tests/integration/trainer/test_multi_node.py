"""`agenthub train --ray-address` on a real Ray cluster of two nodes (`_ray_nodes`): one part of
the run on the head, where the driver runs, and the other on the second node, which sees none
of the driver's files (the run directory and the model copy are hidden from it). The model
reaches the remote learner or rollout worker through Ray's object store; the checkpoints and
the exported model a remote learner writes come back to the driver's run directory; a
`--resume` ships the checkpoint back to it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._ray_nodes import HEAD, SECOND, RayNodes, ray_env, two_nodes

pytestmark = [pytest.mark.integration]

SMALL = [
    "--env", "code_exec", "rollout.n_samples_per_prompt=4", "rollout.concurrency=16",
    "rollout.max_turns=2", "rollout.max_reply_tokens=96", "algorithm.batch_groups=2",
    "algorithm.max_staleness=1", "algorithm.filter_groups=false", "eval.every=0",
    "run.checkpoint_every=2", "run.wandb=disabled",
]  # fmt: skip
LEARNER_REMOTE = [
    'ray.learner_resources={"second_node": 1}',
    'ray.worker_resources={"head_node": 1}',
]
WORKER_REMOTE = [
    'ray.learner_resources={"head_node": 1}',
    'ray.worker_resources={"second_node": 1}',
]


def _hidden_model(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The directory the second node cannot see, the model copied into it, and the run
    directory in it."""
    from agenthub.agents._engines import resolve_model

    hidden = tmp_path / "driver"
    default = resolve_model("default", needed=True)
    assert default is not None
    shutil.copytree(default, hidden / "model")
    return hidden, hidden / "model", hidden / "run"


def _placed(out: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((out / "logs" / "processes.json").read_text())["nodes"]  # type: ignore[no-any-return]


def _train(nodes: RayNodes, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agenthub", "train", "--out", str(out)]
    command += ["--ray-address", nodes.address, *args]
    env = ray_env() | {"WANDB_SILENT": "true"}
    return subprocess.run(command, capture_output=True, text=True, timeout=800, env=env)


def _summary(result: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.timeout(1200)
def test_a_run_trains_with_its_learner_on_a_node_without_the_drivers_files(
    tmp_path: Path,
) -> None:
    hidden, model, out = _hidden_model(tmp_path)
    with two_nodes(hidden) as nodes:
        first = _train(nodes, out, "--model", str(model), "--steps", "2", *SMALL, *LEARNER_REMOTE)
        summary = _summary(first)
        assert summary["steps"] == 2 and summary["stopped"] == "reached max_steps=2"

        placed = _placed(out)
        assert placed["driver"] == nodes.node_ids[HEAD]
        assert placed["learner_ranks"] == [nodes.node_ids[SECOND]], "the learner is remote"
        assert placed["rollout_workers"] == [nodes.node_ids[HEAD]]

        state = json.loads((out / "checkpoints" / "state.json").read_text())
        assert state["step"] == 2
        saved = out / "checkpoints" / "step-2"
        assert (saved / "agenthub_single_rank.pt").is_file(), (
            "the remote learner's checkpoint is in the driver's run directory"
        )
        exported = json.loads((out / "model" / "agenthub_checkpoint.json").read_text())
        assert exported["tag"] == "step-2" and (out / "model" / "model.safetensors").is_file()

        resumed = _train(nodes, out, "--resume", "--steps", "3")
        assert _summary(resumed)["steps"] == 3
        assert "resumed from step-2" in resumed.stdout + resumed.stderr
        assert json.loads((out / "checkpoints" / "state.json").read_text())["step"] == 3
        exported = json.loads((out / "model" / "agenthub_checkpoint.json").read_text())
        assert exported["tag"] == "step-3"
    from agenthub.trainer._metrics import read_metrics

    metrics = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in metrics if "train/reward" in r] == [1, 2, 3]


@pytest.mark.timeout(900)
def test_a_run_trains_with_its_rollout_worker_on_a_node_without_the_drivers_files(
    tmp_path: Path,
) -> None:
    hidden, model, out = _hidden_model(tmp_path)
    with two_nodes(hidden) as nodes:
        result = _train(nodes, out, "--model", str(model), "--steps", "1", *SMALL, *WORKER_REMOTE)
        assert _summary(result)["steps"] == 1
        placed = _placed(out)
        assert placed["rollout_workers"] == [nodes.node_ids[SECOND]], "the worker is remote"
        assert placed["learner_ranks"] == [nodes.node_ids[HEAD]]
    samples = (out / "trajectories.jsonl").read_text().splitlines()
    assert samples and all(json.loads(line)["error"] is None for line in samples)
