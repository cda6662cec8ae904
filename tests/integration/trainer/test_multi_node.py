"""`agenthub train --ray-address` on a real Ray cluster of two nodes (`_ray_nodes`) whose second
node sees none of the driver's files (the run directory and the model copy are hidden from it),
started once for two runs, since a cluster and each run's start-up cost most of the time.

The first, a `code_exec` run, has two rollout workers, one on each node (the head offers two
CPUs, the learner's and one worker's; the second node one, the other worker's), and the learner
on the head. The remote worker gets the model through Ray's object store and plays without the
driver's files. Once a checkpoint exists the second node is stopped, its raylet and its worker
with it, as when a machine goes away. The head has no room for a replacement, so after
`run.worker_placement_timeout_s` the run gives that worker up, says so, and goes on with the
one worker left; then the second node starts again, as the machine back, and the run takes the
worker back on it. Once that worker has drawn tasks again the run is stopped (SIGINT: it ends
the step and checkpoints), since more steps would check nothing more. (A replacement that finds
room at once is covered by tests/unit/trainer/test_node_loss.py.)

The second resumes that run with its learner moved to the second node: the checkpoint is
shipped to it, and the checkpoint and the exported model it writes come back to the driver's
run directory."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration._ray_nodes import HEAD, SECOND, RayNodes, ray_env, two_nodes
from tests.integration.trainer.test_chaos import _wait
from tests.integration.trainer.test_train_cli import _records, _start, _state, _trained_steps

pytestmark = [pytest.mark.integration]

BOUND = 200  # never reached: the run is stopped once the worker lost is back and has played
PLACEMENT_S = 20
ARGS = [
    "--env", "code_exec", "--steps", str(BOUND), "ray.rollout_workers=2",
    'ray.learner_resources={"head_node": 1}', f"run.worker_placement_timeout_s={PLACEMENT_S}",
    "rollout.n_samples_per_prompt=4", "rollout.concurrency=8", "rollout.max_turns=2",
    "rollout.max_reply_tokens=96", "algorithm.batch_groups=2", "algorithm.max_staleness=1",
    "algorithm.filter_groups=false", "eval.every=0", "run.checkpoint_every=2",
    "run.save_trajectories=2", "run.wandb=disabled",
]  # fmt: skip
LEARNER_REMOTE = [
    'ray.learner_resources={"second_node": 1}',
    'ray.worker_resources={"head_node": 0.5}',  # both workers there
    # Both workers start on the head, beside nothing else: a slow start is not a lost node.
    "run.worker_placement_timeout_s=300",
]


@dataclass
class Loss:
    """What the test saw of the node's loss: the worker's `rank`, the steps trained when the
    node was stopped (`at`), when its worker was given up and when it was back, the second
    node's new id, and the seconds each phase took from the run's start (printed only)."""

    rank: int
    at: int
    given_up_at: int
    back_at: int
    again: str
    phases: dict[str, float]


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
    """The Ray node of each of the run's processes, as logs/processes.json names them."""
    return json.loads((out / "logs" / "processes.json").read_text())["nodes"]  # type: ignore[no-any-return]


def _one_on_each(out: Path, nodes: RayNodes) -> bool:
    """Whether a checkpoint exists and a rollout worker runs on each node (one not placed at
    start on a busy machine is taken back once it has started)."""
    if not (out / "checkpoints" / "state.json").exists():
        return False
    workers = _placed(out)["rollout_workers"]
    return sorted(workers) == sorted(nodes.node_ids[n] for n in (HEAD, SECOND))


def _drawn(out: Path, rank: int) -> tuple[int, int]:
    """The newest checkpoint's step and the tasks rollout worker `rank` had drawn by then."""
    state = _state(out)
    return state["step"], state["tasks_drawn"][rank]


def _lose_and_regain(nodes: RayNodes, run: subprocess.Popen[str], out: Path, log: Path) -> Loss:
    """Stop the second node once the run trains with a worker on each node, start it again
    once the run gave that worker up, and stop the run once the worker is back and has drawn
    tasks again."""
    start, phases = time.monotonic(), {}

    def phase(name: str) -> None:
        phases[name] = round(time.monotonic() - start, 1)

    def since_loss() -> str:
        return " ".join(log.read_text()[mark:].split())  # the terminal's lines are wrapped

    _wait(run, log, "a checkpoint, a worker on each node", lambda: _one_on_each(out, nodes))
    phase("started")
    rank = _placed(out)["rollout_workers"].index(nodes.node_ids[SECOND])
    at, mark = len(_trained_steps(out)), len(log.read_text())
    nodes.stop_second()
    phase("node stopped")
    _wait(run, log, "the worker lost", lambda: f"rollout worker {rank} died" in since_loss())
    phase("worker lost")
    _wait(run, log, "the worker given up", lambda: f"{rank} not replaced" in since_loss())
    phase("worker given up")
    given_up_at = len(_trained_steps(out))
    nodes.restart_second()
    phase("node back")
    _wait(run, log, "the worker back", lambda: f"rollout worker {rank} back" in since_loss())
    phase("worker back")
    back_at = len(_trained_steps(out))
    _wait(run, log, "a checkpoint after", lambda: _drawn(out, rank)[0] > back_at)
    drawn = _drawn(out, rank)[1]
    _wait(run, log, "the worker back drawing", lambda: _drawn(out, rank)[1] > drawn)
    phase("worker back played")
    run.send_signal(signal.SIGINT)
    run.wait(timeout=300)
    phase("run stopped")
    return Loss(rank, at, given_up_at, back_at, nodes.node_ids[SECOND], phases)


def _train(nodes: RayNodes, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agenthub", "train", "--out", str(out)]
    command += ["--ray-address", nodes.address, *args]
    env = ray_env() | {"WANDB_SILENT": "true"}
    return subprocess.run(command, capture_output=True, text=True, timeout=800, env=env)


def _summary(output: str) -> dict:  # type: ignore[type-arg]
    """The JSON summary a run prints last."""
    return json.loads(next(ln for ln in reversed(output.splitlines()) if ln.startswith("{")))  # type: ignore[no-any-return]


@pytest.mark.timeout(1500)
def test_a_run_on_two_nodes_survives_losing_one_and_resumes_with_its_learner_on_it(
    tmp_path: Path,
) -> None:
    hidden, model, out = _hidden_model(tmp_path)
    log = tmp_path / "run.log"
    with two_nodes(hidden, head_cpus=2, second_cpus=1) as nodes:
        head = nodes.node_ids[HEAD]
        run = _start(out, log, "--ray-address", nodes.address, "--model", str(model), *ARGS)
        try:
            loss = _lose_and_regain(nodes, run, out, log)
        finally:
            if run.poll() is None:
                run.kill()
        output = log.read_text()
        assert run.returncode == 130, output[-6000:]  # stopped by SIGINT, with a checkpoint
        steps = _state(out)["step"]
        _check_the_loss(out, output, loss, head)

        resumed = _train(nodes, out, "--resume", "--steps", str(steps + 1), *LEARNER_REMOTE)
        said = resumed.stdout + resumed.stderr
        assert resumed.returncode == 0, said[-6000:]
        summary = _summary(resumed.stdout)
        assert summary["steps"] == steps + 1
        assert summary["stopped"] == f"reached max_steps={steps + 1}"
        assert f"resumed from step-{steps}" in said
        placed = _placed(out)
        assert placed["driver"] == head
        assert placed["learner_ranks"] == [nodes.node_ids[SECOND]], "the learner is remote"
        assert placed["rollout_workers"] == [head, head]
    _check_the_remote_learners_files(out, steps + 1)


def _check_the_loss(out: Path, output: str, loss: Loss, head: str) -> None:
    """The run lost the second node's worker, went on with one, took it back, and trained every
    step once; the remote worker's episodes had no error."""
    summary = _summary(output)
    steps = summary["steps"]
    print(
        f"the node was lost after step {loss.at}, its worker given up after {loss.given_up_at} "
        f"and back after {loss.back_at}, stopped at {steps}: {summary['faults']}; seconds from "
        f"the start: {loss.phases}"
    )
    assert loss.given_up_at < steps and loss.back_at < steps, "the run went on after each"
    assert summary["stopped"] == "interrupted by SIGINT"
    assert summary["faults"]["seen"] == summary["faults"]["survived"] == 1
    # Only what the lost worker was playing: at most the groups it admits ahead of its slots
    # (2 x ceil(rollout.concurrency / n_samples_per_prompt) groups of 4). The groups it had
    # finished are the queue's, on the head.
    assert summary["faults"]["episodes_lost"] <= 2 * 2 * 4
    assert summary["rollout_workers"] == 2, "the worker given up came back"
    said = " ".join(output.split())  # the terminal's lines are wrapped
    assert f"rollout worker {loss.rank} died" in said
    assert (
        f"rollout worker {loss.rank} not replaced (the Ray cluster had no room for a new worker "
        f"within run.worker_placement_timeout_s={PLACEMENT_S} s): 1 of 2 rollout workers left"
    ) in said
    assert f"rollout worker {loss.rank} back: 2 of 2 rollout workers" in said
    placed = _placed(out)
    assert placed["learner_ranks"] == [head]
    assert sorted(placed["rollout_workers"]) == sorted([head, loss.again]), "one on each"

    assert [r["step"] for r in _records(out) if "train/reward" in r] == list(range(1, steps + 1))
    assert _state(out)["step"] == steps
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == 2 * steps and len(set(lines)) == len(lines), "none trained twice"
    assert all(json.loads(line)["error"] is None for line in lines), "the remote worker played"


def _check_the_remote_learners_files(out: Path, step: int) -> None:
    """The checkpoint and the exported model of the remote learner's `step` are in the
    driver's run directory, and every step's metrics once, in order."""
    assert _state(out)["step"] == step
    saved = out / "checkpoints" / f"step-{step}"
    assert (saved / "agenthub_single_rank.pt").is_file(), (
        "the remote learner's checkpoint is in the driver's run directory"
    )
    exported = json.loads((out / "model" / "agenthub_checkpoint.json").read_text())
    assert exported["tag"] == f"step-{step}" and (out / "model" / "model.safetensors").is_file()
    assert [r["step"] for r in _records(out) if "train/reward" in r] == list(range(1, step + 1))
