"""A lost Ray node, on an in-memory cluster: the rollout worker it held comes back where the
cluster has room, the run goes on with fewer workers where it has none, and stops with the
cause when none is left. The same on a real two-node Ray cluster runs in
tests/integration/trainer/test_multi_node.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub import AgentHubError
from agenthub.trainer import RunDirectory
from agenthub.trainer._control import FaultCounts

from ._fakes import Kills, trajectory
from .test_trainer_loop import _train, _trained

NOT_PLACED = (
    "rollout worker 1 not replaced (the Ray cluster had no room for a new worker within "
    "run.worker_placement_timeout_s=45 s): 1 of 2 rollout workers left; 2 episode(s) in "
    "flight lost, the run goes on"
)


def _group(task: str, version: int) -> list:  # type: ignore[type-arg]
    return [trajectory(score, version).model_copy(update={"task_id": task}) for score in (1.0, 0.0)]


def test_a_lost_worker_comes_back_where_the_cluster_has_room(tmp_path: Path) -> None:
    trainer, clusters, said, _ = _train(
        tmp_path,
        "run.max_steps=4",
        "ray.rollout_workers=2",
        kills=Kills(worker_at=[2], worker_rank=1),
        room=1,
    )
    summary = trainer.run()
    assert summary.steps == 4 and _trained(tmp_path) == [1, 2, 3, 4]
    assert summary.rollout_workers == 2 and summary.to_json()["rollout_workers"] == 2
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=2)
    assert [(ranks, version) for ranks, version, _ in clusters.made[0].replaced] == [([1], 3)]
    assert (
        "rollout worker 1 replaced, its engine at policy version 3; 2 episode(s) in flight "
        "lost, the run goes on" in said
    )


def test_a_lost_worker_with_no_room_leaves_the_run_fewer_workers(tmp_path: Path) -> None:
    trainer, clusters, said, _ = _train(
        tmp_path,
        "run.max_steps=5",
        "ray.rollout_workers=2",
        "run.worker_placement_timeout_s=45",
        kills=Kills(worker_at=[3], worker_rank=1),
        room=0,
    )
    summary = trainer.run()
    assert summary.steps == 5 and summary.stopped.kind == "max_steps"
    assert _trained(tmp_path) == [1, 2, 3, 4, 5], "no step lost or taken twice"
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=2)
    assert summary.rollout_workers == 1, "the run ended with the workers it had left"
    assert any(line.startswith("rollout worker 1 died") for line in said)
    assert NOT_PLACED in said
    assert len(clusters.made) == 1 and clusters.made[0].workers == {0}
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == 5
    # Worker 1's place in its task stream is the last one checkpointed before it was lost
    # (three takes of two groups), for a resumed run with both workers; worker 0 went on.
    assert state.tasks_drawn == [10, 6]


def test_a_run_left_with_no_worker_stops_with_the_cause(tmp_path: Path) -> None:
    trainer, clusters, said, _ = _train(
        tmp_path, "run.max_steps=9", kills=Kills(worker_at=[3]), room=0
    )
    with pytest.raises(AgentHubError) as failed:
        trainer.run()
    message = str(failed.value)
    assert message.startswith(
        "no rollout worker is left: rollout worker 0 died and the Ray cluster had no room for "
        "a new worker within run.worker_placement_timeout_s=120 s, as when the Ray node it ran "
        "on is lost. Add a node to the Ray cluster"
    )
    assert message.endswith(
        f"It is checkpointed at step 3: continue it with agenthub train --out {tmp_path} --resume"
    )
    assert _trained(tmp_path) == [1, 2, 3]
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.step == 3, "checkpointed before it stops"
    assert trainer.faults.counts == FaultCounts(seen=1, survived=0, episodes_lost=0)
    assert not any("the run goes on" in line for line in said)
    assert clusters.made[0].closed


def test_groups_a_lost_worker_had_queued_are_trained_only_its_playing_episodes_lost(
    tmp_path: Path,
) -> None:
    def queue_at_step_1(step: int) -> None:
        if step == 1:  # the worker that dies at step 2 queued these before it died
            clusters.made[0].waiting = [_group(f"queued-{i}", 1) for i in range(3)]

    trainer, clusters, _, _ = _train(
        tmp_path,
        "run.max_steps=4",
        "ray.rollout_workers=2",
        "rollout.n_samples_per_prompt=2",
        "run.save_trajectories=4",
        kills=Kills(worker_at=[2], worker_rank=1),
        room=1,
        on_learn=queue_at_step_1,
    )
    summary = trainer.run()
    assert summary.steps == 4 and _trained(tmp_path) == [1, 2, 3, 4]
    # The queue, on the driver's node, holds what the worker finished: only the 2 episodes
    # it was playing are lost.
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=2)
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    tasks = [json.loads(line)["task_id"] for line in lines]
    assert sorted(t for t in tasks if t.startswith("queued")) == sorted(
        [f"queued-{i}" for i in range(3) for _ in range(2)]
    ), "each queued group trained, once"


def test_a_given_up_worker_comes_back_when_a_node_has_room(tmp_path: Path) -> None:
    def room_at_step_4(step: int) -> None:
        if step == 4:
            clusters.made[0].room = 1  # a node joins

    trainer, clusters, said, _ = _train(
        tmp_path,
        "run.max_steps=6",
        "ray.rollout_workers=2",
        "run.worker_placement_timeout_s=45",
        kills=Kills(worker_at=[2], worker_rank=1),
        room=0,
        on_learn=room_at_step_4,
    )
    summary = trainer.run()
    assert summary.steps == 6 and _trained(tmp_path) == [1, 2, 3, 4, 5, 6]
    assert summary.rollout_workers == 2, "the run ended with both workers"
    cluster = clusters.made[0]
    assert cluster.taken_back == [([1], 4)], "back after step 4, its engine at version 4"
    # Given up after step 3 (step 3's batch was assembled before the worker died), asked
    # after step 4 and once more as it is taken in; not after it is back.
    assert cluster.asked_for_room == 2
    not_placed = next(i for i, line in enumerate(said) if "not replaced" in line)
    back = said.index("rollout worker 1 back: 2 of 2 rollout workers")
    assert not_placed < back
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=2)
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.tasks_drawn[1] > 4, "worker 1 drew tasks again"


def test_a_worker_with_no_room_at_the_start_is_given_up_its_place_kept(tmp_path: Path) -> None:
    first, _, _, _ = _train(tmp_path, "run.max_steps=2", "ray.rollout_workers=2")
    first.run()
    before = RunDirectory(tmp_path).state()
    assert before is not None and before.tasks_drawn == [4, 4]
    trainer, clusters, said, _ = _train(
        tmp_path, "run.max_steps=4", "ray.rollout_workers=2", resume=True, start_room=1, room=0
    )
    summary = trainer.run()
    assert summary.steps == 4 and _trained(tmp_path) == [1, 2, 3, 4]
    assert summary.rollout_workers == 1
    assert (
        "rollout worker 1 not placed (the Ray cluster had no room for a new worker within "
        "run.worker_placement_timeout_s=120 s): the run starts with 1 of 2 rollout workers, "
        "and takes it back once a node has room"
    ) in said
    assert summary.faults == FaultCounts(), "not a fault: no process died"
    state = RunDirectory(tmp_path).state()
    assert state is not None and state.tasks_drawn == [8, 4], "worker 1's place is kept"
    assert clusters.made[0].asked_for_room == 2, "after steps 3 and 4"


def test_a_worker_given_up_at_the_start_comes_back_when_there_is_room(tmp_path: Path) -> None:
    trainer, clusters, said, _ = _train(
        tmp_path, "run.max_steps=3", "ray.rollout_workers=2", start_room=1
    )
    summary = trainer.run()
    assert summary.steps == 3 and summary.rollout_workers == 2
    assert clusters.made[0].taken_back == [([1], 1)]
    assert "rollout worker 1 back: 2 of 2 rollout workers" in said


def test_a_run_whose_workers_find_no_room_at_the_start_says_what_to_do(tmp_path: Path) -> None:
    trainer, clusters, _, _ = _train(
        tmp_path, "run.max_steps=3", "ray.rollout_workers=2", start_room=0
    )
    with pytest.raises(AgentHubError) as failed:
        trainer.run()
    assert str(failed.value).startswith(
        "no rollout worker could start: the Ray cluster had no room for a new worker within "
        "run.worker_placement_timeout_s=120 s for any of the 2 (each needs a CPU, "
        "ray.worker_num_gpus GPUs and ray.worker_resources), as when a node of the cluster is "
        "lost. Add a node to the Ray cluster or free room on one"
    )
    assert _trained(tmp_path) == [] and clusters.made[0].closed
