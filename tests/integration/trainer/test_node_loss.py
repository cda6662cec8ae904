"""A `code_exec` training run on a real Ray cluster of two nodes (`_ray_nodes`) that loses its
second node: two rollout workers, one on each node (the head offers two CPUs, the learner's and
one worker's; the second node one, the other worker's), and the learner on the head. Once a
checkpoint exists the second node is stopped, its raylet and its worker with it, as when a
machine goes away. The head has no room for a replacement, so after
`run.worker_placement_timeout_s` the run gives that worker up, says so, and goes on with the
one worker left; then the second node starts again, as the machine back, and the run takes
the worker back on it and reaches its steps with both. (A replacement that finds room at once
is covered by tests/unit/trainer/test_node_loss.py.) The second node sees the driver's files
here: what is tested is the loss of a node, not a cluster without a shared filesystem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._ray_nodes import HEAD, SECOND, ray_env, two_nodes
from tests.integration.trainer.test_chaos import _ended, _wait
from tests.integration.trainer.test_train_cli import _records, _state, _trained_steps

pytestmark = [pytest.mark.integration]

STEPS = 50  # steps take seconds: enough to outlast the loss, the wait for room, and the return
PLACEMENT_S = 20
ARGS = [
    "--env", "code_exec", "--steps", str(STEPS), "ray.rollout_workers=2",
    'ray.learner_resources={"head_node": 1}', f"run.worker_placement_timeout_s={PLACEMENT_S}",
    "rollout.n_samples_per_prompt=4", "rollout.concurrency=8", "rollout.max_turns=2",
    "rollout.max_reply_tokens=96", "algorithm.batch_groups=2", "algorithm.max_staleness=1",
    "algorithm.filter_groups=false", "eval.every=0", "run.checkpoint_every=2",
    "run.save_trajectories=2", "run.wandb=disabled",
]  # fmt: skip


def _placed(out: Path) -> dict:  # type: ignore[type-arg]
    """The Ray node of each of the run's processes, as logs/processes.json names them."""
    return json.loads((out / "logs" / "processes.json").read_text())["nodes"]  # type: ignore[no-any-return]


@pytest.mark.timeout(1200)
def test_a_run_that_loses_a_node_goes_on_with_the_workers_left(tmp_path: Path) -> None:
    out, log = tmp_path / "run", tmp_path / "run.log"
    with two_nodes(tmp_path / "unused", head_cpus=2, second_cpus=1) as nodes:
        head, second = nodes.node_ids[HEAD], nodes.node_ids[SECOND]
        command = [sys.executable, "-m", "agenthub", "train", "--out", str(out)]
        command += ["--ray-address", nodes.address, *ARGS]
        with log.open("w") as sink:
            run = subprocess.Popen(
                command,
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
                env=ray_env() | {"WANDB_SILENT": "true"},
            )
        try:
            _wait(
                run, log, "the first checkpoint", lambda: (out / "checkpoints/state.json").exists()
            )
            placed = _placed(out)
            assert placed["learner_ranks"] == [head]
            assert sorted(placed["rollout_workers"]) == sorted([head, second]), "one on each"
            rank = placed["rollout_workers"].index(second)
            at = len(_trained_steps(out))
            nodes.stop_second()
            _wait(run, log, "the worker given up", lambda: "not replaced" in log.read_text())
            given_up_at = len(_trained_steps(out))
            assert given_up_at < STEPS, "the run must still be going"
            nodes.restart_second()
            again = nodes.node_ids[SECOND]
            _wait(run, log, "the worker back", lambda: "2 of 2 rollout workers" in log.read_text())
            back_at = len(_trained_steps(out))
            run.wait(timeout=600)
        finally:
            if run.poll() is None:
                run.kill()
    output, summary = _ended(run, log)
    print(
        f"the node was lost after step {at}, its worker given up after {given_up_at} and back "
        f"after {back_at} of {STEPS}: {summary['faults']}"
    )
    assert summary["steps"] == STEPS and summary["stopped"] == f"reached max_steps={STEPS}"
    assert summary["faults"]["seen"] == summary["faults"]["survived"] == 1
    # Only what the lost worker was playing: at most the groups it admits ahead of its slots
    # (2 x ceil(rollout.concurrency / n_samples_per_prompt) groups of 4). The groups it had
    # finished are the queue's, on the head.
    assert summary["faults"]["episodes_lost"] <= 2 * 2 * 4
    assert summary["rollout_workers"] == 2, "the worker given up came back"
    said = " ".join(output.split())  # the terminal's lines are wrapped
    assert f"rollout worker {rank} died" in said
    assert (
        f"rollout worker {rank} not replaced (the Ray cluster had no room for a new worker "
        f"within run.worker_placement_timeout_s={PLACEMENT_S} s): 1 of 2 rollout workers left"
    ) in said
    assert f"rollout worker {rank} back: 2 of 2 rollout workers" in said
    assert sorted(_placed(out)["rollout_workers"]) == sorted([head, again]), "one on each"

    steps = [r["step"] for r in _records(out) if "train/reward" in r]
    assert steps == list(range(1, STEPS + 1)), "every step's metrics once, in order"
    assert _state(out)["step"] == STEPS
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 * STEPS and len(set(lines)) == len(lines), "none trained twice"
