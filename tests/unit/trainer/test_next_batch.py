"""The next batch, assembled while the learner trains (`NextBatch`), across a rollout worker's
death: no group taken off the queue is lost or trained twice, and the admission places of the
dead worker's groups come back."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the trainer needs the train extra")

from agenthub.agents import Trajectory
from agenthub.trainer import Trainer
from agenthub.trainer._assembly import BatchAssembler
from agenthub.trainer._cluster import Replaced
from agenthub.trainer._config import TrainConfig, load_config
from agenthub.trainer._control import FaultCounts, RunControl
from agenthub.trainer._metrics import read_metrics
from agenthub.trainer._next_batch import NextBatch
from agenthub.trainer._workers import Admission

from ._fakes import FakeCluster, ProcessDied, SlowLearner, trajectory

SMALL = [
    "env=math",
    "algorithm.batch_groups=2",
    "eval.every=0",
    "run.checkpoint_every=2",
    "run.wandb=disabled",
    "run.save_trajectories=4",  # every trajectory of a batch
]


def _group(task: int, version: int) -> list[Trajectory]:
    return [
        trajectory(score, version).model_copy(update={"task_id": f"task-{task}"})
        for score in (1.0, 0.0)
    ]


class _GatedWorker(SlowLearner):
    """One rollout worker admitted through the real `Admission` gate: it starts a group of a
    task of its own for every place the gate opens and finishes one of them at each take off
    the queue. The queue hands groups out as Ray's does, off the queue before they are
    fetched, so a take cut short between the two loses them. The worker dies once, during
    learner step `dies_at`, right after it queued a group, which the next batch is still
    fetching when the driver finds the death; the groups it was still playing die with it."""

    def __init__(self, cfg: TrainConfig, version: int, drawn: list[int], *, dies_at: int) -> None:
        super().__init__(cfg, version, drawn)
        algo = cfg.algorithm
        self.gate = Admission(algo.batch_groups, algo.max_staleness, version)
        self.dies_at = dies_at
        self.life = 0
        self.playing: list[list[Trajectory]] = []
        self.in_queue: list[list[Trajectory]] = []
        self.landed: list[str] = []
        self.handed_out: list[str] = []

    def _room(self) -> bool:
        gate = self.gate
        return gate.started - gate.discarded < (
            (gate.version + gate.max_staleness + 1) * gate.batch
        )

    async def _play(self) -> None:
        while not self.dead_workers and self._room():
            task = self.tasks_drawn[0] + 1
            self.tasks_drawn = [task]
            version = await self.gate.acquire(0, task, self.life)
            self.playing.append(_group(task, version))
        if self.playing and not self.dead_workers:
            group = self.playing.pop(0)
            self.in_queue.append(group)
            self.gate.landed(0, self.life)
            self.landed.append(group[0].task_id)
        if self.learning and self.learner_steps + 1 == self.dies_at:
            self.dies_at = -1
            self.dead_workers.add(0)

    async def take_groups(self, most: int, timeout_s: float) -> list[list[Trajectory]]:
        await asyncio.sleep(0)
        await self._play()
        if not self.in_queue:
            raise TimeoutError("no trajectory arrived")
        got, self.in_queue = self.in_queue[:most], self.in_queue[most:]
        for _ in range(40):  # fetched from the object store, longer than a learner step
            await asyncio.sleep(0)
        self.handed_out += [group[0].task_id for group in got]
        return got

    async def give_back(self, groups: int) -> None:
        await super().give_back(groups)
        await self.gate.discard(groups)

    async def admit_version(self, version: int) -> None:
        await self.gate.set_version(version)
        await super().admit_version(version)

    async def replace_workers(self, ranks: list[int], version: int) -> Replaced:
        lost, _ = await self.gate.forget(0)
        self.playing.clear()
        self.life += 1
        replaced = await super().replace_workers(ranks, version)
        return dataclasses.replace(replaced, episodes_lost=2 * lost)


def test_a_worker_lost_while_the_next_batch_is_assembled_loses_no_group(tmp_path: Path) -> None:
    made: list[_GatedWorker] = []

    def cluster(cfg: TrainConfig, version: int, drawn: list[int]) -> _GatedWorker:
        made.append(_GatedWorker(cfg, version, drawn, dies_at=2))
        return made[-1]

    trainer = Trainer(
        load_config([], [*SMALL, "run.max_steps=4"]), tmp_path, log=lambda _: None, cluster=cluster
    )
    summary = trainer.run()
    assert summary.steps == 4 and len(made) == 1, "the session went on"
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    worker = made[0]
    lines = (tmp_path / "trajectories.jsonl").read_text().splitlines()
    trained = [json.loads(line)["task_id"] for line in lines][::2]
    assert trained == worker.handed_out, "every group taken off the queue trained, once"
    assert len(set(trained)) == len(trained) == 8
    queued = [group[0].task_id for group in worker.in_queue]
    assert worker.landed == trained + queued, "every group queued trained or still queued"
    assert summary.faults == FaultCounts(seen=1, survived=1, episodes_lost=2)
    gate = worker.gate
    in_place = gate.started - gate.discarded
    assert in_place == len(trained) + len(queued) + len(worker.playing), "no place leaked"


class _Dies(FakeCluster):
    """A queue that hands out one group, then none, as a dead worker's would; a rollout worker
    replaced (`revive`) fills it again."""

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        self.left = 1
        self.taking = asyncio.Event()
        self.hold = asyncio.Event()
        self.hold.set()

    async def take_groups(self, most: int, timeout_s: float) -> list[list[Trajectory]]:
        self.taking.set()
        await self.hold.wait()
        if self.left == 0:
            raise TimeoutError("no trajectory arrived")
        self.left -= 1
        return [_group(self.left + 10 * len(self.calls), 3)]

    def check_workers(self) -> None:
        if self.left == 0 and not self.calls:
            raise ProcessDied("rollout worker 0 died")

    def revive(self) -> None:
        self.calls.append("replaced")
        self.left = 10


def _next_batch(tmp_path: Path) -> tuple[NextBatch, _Dies]:
    cfg = load_config([], SMALL)
    cluster = _Dies(cfg)
    assembler = BatchAssembler(
        cfg, cluster, RunControl(), out=tmp_path, log=lambda _: None, on_idle=cluster.check_workers
    )
    return NextBatch(assembler, cfg.algorithm, deadline=float("inf")), cluster


def test_a_dead_worker_found_by_the_next_batch_is_raised_where_it_is_taken(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[str]:
        upcoming, cluster = _next_batch(tmp_path)
        upcoming.start(3)
        with pytest.raises(ProcessDied, match="rollout worker 0 died"):
            await upcoming.take()
        assert not upcoming.started
        cluster.revive()
        upcoming.start(3)
        ready = await upcoming.take()
        assert ready is not None
        return [group[0].task_id for group in ready[0].groups]

    assert asyncio.run(scenario()) == ["task-0", "task-19"], "the group before the death kept"


def test_a_pause_lets_the_take_under_way_end_rather_than_cut_it_short(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[str], bool]:
        upcoming, cluster = _next_batch(tmp_path)
        cluster.revive()
        cluster.hold.clear()
        upcoming.start(3)
        await cluster.taking.wait()  # the first take waits for its group
        pausing = asyncio.ensure_future(upcoming.pause())
        await asyncio.sleep(0)
        assert not pausing.done(), "the pause waits for the take"
        cluster.hold.set()
        await pausing
        paused = not upcoming.started  # stopped after one take: the batch is half full
        upcoming.start(3)
        ready = await upcoming.take()
        assert ready is not None
        return [group[0].task_id for group in ready[0].groups], paused

    groups, paused = asyncio.run(scenario())
    assert paused and groups == ["task-19", "task-18"], "the group of the paused take kept"
