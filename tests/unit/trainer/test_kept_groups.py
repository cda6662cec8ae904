"""Finished groups outlive a stop, a resume and a learner restart, on an in-memory cluster:
each checkpoint keeps the groups finished and not yet trained, a resumed or restarted run
trains them (or counts them stale, as it would have without the stop), and no trajectory is
trained twice. Every trajectory here carries a task id of its own, to follow it."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.agents import Trajectory
from agenthub.trainer import RunDirectory
from agenthub.trainer._control import FaultCounts
from agenthub.trainer._metrics import read_metrics
from agenthub.trainer._workers import Admission

from ._fakes import Kills, trajectory
from .test_trainer_loop import _train, _trained

FOLLOWED = ["eval.every=0", "run.save_trajectories=100"]  # every trajectory of every step


def _group(task: str, version: int) -> list[Trajectory]:
    """A group of two, every token sampled by policy `version`."""
    return [
        trajectory(score, version).model_copy(
            update={"task_id": task, "policy_versions": [version] * 3}
        )
        for score in (1.0, 0.0)
    ]


class _Numbered:
    """The queue's groups, each of a task of its own (`g0`, `g1`, ...)."""

    def __init__(self) -> None:
        self.count = itertools.count()

    def __call__(self, version: int) -> list[list[Trajectory]]:
        return [_group(f"g{next(self.count)}", version)]


def _steps(out: Path) -> list[list[str]]:
    """The task ids each step trained, from trajectories.jsonl (two per group)."""
    by_step: dict[int, list[str]] = {}
    records = [r for r in read_metrics(out / "metrics.jsonl") if "train/reward" in r]
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    tasks = iter(json.loads(line)["task_id"] for line in lines)
    for r in records:
        by_step[r["step"]] = [next(tasks) for _ in range(2 * r["groups/trained"])][::2]
    return [by_step[step] for step in sorted(by_step)]


def _kept(out: Path) -> list[str]:
    run = RunDirectory(out)
    state = run.state()
    assert state is not None
    return [group[0].task_id for group in run.groups(state)]


def test_a_checkpoint_keeps_the_queued_groups_and_a_resume_trains_them_first(
    tmp_path: Path,
) -> None:
    def queue_at_step_2(step: int) -> None:
        if step == 2:  # finished while the learner trained its last step
            first.made[0].waiting = [_group(f"queued-{i}", 1) for i in range(3)]

    trainer, first, _, _ = _train(
        tmp_path, "run.max_steps=2", *FOLLOWED, groups=_Numbered(), on_learn=queue_at_step_2
    )
    assert trainer.run().steps == 2
    assert _kept(tmp_path) == ["queued-0", "queued-1", "queued-2"], "kept with the checkpoint"

    resumed, again, said, _ = _train(
        tmp_path, "run.max_steps=3", *FOLLOWED, resume=True, groups=_Numbered()
    )
    summary = resumed.run()
    assert summary.steps == 3
    assert _steps(tmp_path)[2] == ["queued-0", "queued-1"], "the next step trains them"
    assert _kept(tmp_path) == ["queued-2"], "the one left over kept again, not lost"
    assert again.made[0].held == 3, "they took their places in the admission gate"
    assert summary.faults == FaultCounts(episodes_kept=6)
    assert "6 finished episode(s) kept from the checkpoint, to be trained or judged stale" in said
    trained = [task for step in _steps(tmp_path) for task in step]
    assert len(trained) == len(set(trained)), "no group trained twice"


def test_kept_groups_too_stale_for_the_restored_policy_are_counted_stale(tmp_path: Path) -> None:
    def queue_at_step_2(step: int) -> None:
        if step == 2:
            first.made[0].waiting = [_group("old", 0), _group("fresh-0", 2), _group("fresh-1", 1)]

    trainer, first, _, _ = _train(
        tmp_path, "run.max_steps=2", *FOLLOWED, groups=_Numbered(), on_learn=queue_at_step_2
    )
    trainer.run()
    resumed, again, _, _ = _train(
        tmp_path, "run.max_steps=3", *FOLLOWED, resume=True, groups=_Numbered()
    )
    resumed.run()
    # Policy 2 trains step 3: a group of policy 0 is more than max_staleness=1 behind.
    assert _steps(tmp_path)[2] == ["fresh-0", "fresh-1"]
    third = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("step") == 3][-1]
    assert third["groups/stale"] == 1
    assert again.made[0].given_back == 1, "its place went back"


def test_a_restarted_learner_trains_the_finished_groups_once(tmp_path: Path) -> None:
    numbered = _Numbered()

    def queue_at_step_3(step: int) -> None:
        if step == 3:  # finished while the learner trained step 4, during which it dies
            first = clusters.made[0]
            first.waiting = [_group("queued-a", 2), _group("queued-b", 3)]

    # A checkpoint at step 2; the learner dies during step 4: the restart takes step 3 again,
    # from policy 2.
    trainer, clusters, said, _ = _train(
        tmp_path,
        "run.max_steps=5",
        *FOLLOWED,
        groups=numbered,
        kills=Kills(learner_at=[4]),
        on_learn=queue_at_step_3,
    )
    summary = trainer.run()
    assert summary.steps == 5 and _trained(tmp_path) == [1, 2, 3, 4, 5]
    assert clusters.started_at == [0, 2]
    steps = _steps(tmp_path)
    trained = [task for step in steps for task in step]
    assert len(trained) == len(set(trained)), "no group trained twice"
    assert steps[2] == ["g4", "g5"], "step 3 taken again on the groups it had"
    # queued-a finished after the checkpoint, sampled by policy 2: the driver kept it.
    assert steps[3][0] == "queued-a"
    # Policy 3 is gone with the learner: its groups (g6, in the batch the learner died on,
    # and queued-b) are never trained, and counted stale.
    assert "queued-b" not in trained and "g6" not in trained
    redone = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r.get("step") == 3][-1]
    assert redone["groups/stale"] == 2
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=4, episodes_kept=10)
    kept = "10 finished episode(s) kept from before the learner died, to be trained or judged"
    assert f"{kept} stale" in said


async def _admitted_after_holding(held: int) -> int:
    """How many groups the gate admits at once at policy 2 with `held` kept groups."""
    gate = Admission(batch_groups=2, max_staleness=1, version=2)
    await gate.hold(held)
    admitted = 0
    while True:
        try:
            await asyncio.wait_for(gate.acquire(0, admitted), timeout=0.05)
        except TimeoutError:
            return admitted
        admitted += 1


def test_kept_groups_hold_their_places_in_the_admission_gate() -> None:
    # At policy 2 with max_staleness=1, (2 + 1 + 1) x 2 groups may be under way, and 2 x 2
    # were trained: 4 places, 3 of them the kept groups'.
    assert asyncio.run(_admitted_after_holding(0)) == 4
    assert asyncio.run(_admitted_after_holding(3)) == 1
