"""An in-memory cluster for the trainer's unit tests: the `Cluster` the driver's parts talk to,
with the learner's checkpoints as directories and every call recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenthub.agents import Timings, Trajectory
from agenthub.agents._eval_summary import EvalSummary, TokenCounts
from agenthub.agents._trajectory import EpisodeError
from agenthub.trainer._batch import TrainBatch
from agenthub.trainer._cluster import ClusterNews, Lost, Replaced
from agenthub.trainer._config import HeldOutConfig, TrainConfig
from agenthub.trainer._learner import MODEL_CHECKPOINT
from agenthub.trainer._workers import WorkerStats
from tests._loop import settle


def trajectory(score: float, version: int, error: bool = False) -> Trajectory:
    return Trajectory(
        env="x",
        task_id="t",
        tokens=[1, 2, 3],
        loss_mask=[0, 1, 1],
        logprobs=[0.0, -1.0, -1.0],
        policy_versions=[version, version, version + 1],
        step_rewards=[score],
        reward=score,
        terminated=not error,
        truncated=False,
        num_turns=1,
        error=EpisodeError(cause="env_error", message="boom") if error else None,
        timings=Timings(),
    )


def held_out_summary(
    reward: float,
    *,
    errors: dict[str, int] | None = None,
    last_error: str | None = None,
    versions: tuple[int, int] = (0, 0),
    episodes: int = 10,
) -> EvalSummary:
    """A held-out evaluation of `episodes` episodes, as a rollout worker reports it."""
    return EvalSummary(
        episodes=episodes,
        tasks=episodes,
        mean_reward=reward,
        mean_score=reward,
        pass_at_k=None,
        terminated=episodes,
        truncated=0,
        errors=errors or {},
        tokens=TokenCounts(total=0, generated=0, mean_generated_per_episode=0.0),
        mean_turns=1.0,
        extra_logs={},
        last_error=last_error,
        policy_version=versions[0],
        policy_version_max=versions[1],
    )


def evaluation(reward: float) -> EvalSummary:
    """A rollout worker's held-out evaluation of 4 episodes; NaN as all of them failed (an
    episode in error counts 0)."""
    if reward != reward:
        return held_out_summary(
            0.0, errors={"env_error": 4}, last_error="env_error: boom", episodes=4
        )
    return held_out_summary(reward, episodes=4)


Groups = Callable[[int], list[list[Trajectory]]]
"""The groups the queue hands out when the policy is at a version."""


def informative(version: int) -> list[list[Trajectory]]:
    return [[trajectory(1.0, version), trajectory(0.0, version)]]


@dataclass
class Kills:
    """When the fake's processes die, shared by every cluster a run makes: rollout worker
    `worker_rank` once the learner reaches each step of `worker_at` (before its next batch),
    the learner during each learner step of `learner_at`. Each happens once."""

    worker_at: list[int] = field(default_factory=list)
    learner_at: list[int] = field(default_factory=list)
    worker_rank: int = 0


class ProcessDied(Exception):
    """What the fake raises where Ray raises `ActorDiedError`."""


class FakeCluster:
    """Rollout workers whose queue gives `groups(version)` at each take (a timeout when it
    gives none), a learner that counts its steps and writes checkpoints as directories, and
    held-out evaluations answered from `eval_rewards` (0.5 once they run out). The Ray
    cluster has room for `room` replacement workers (None: any number); a dead worker with
    none is given up, as when its node is lost, and taken back once there is room (a test
    gives it some later). At the start, it has room for `start_room` workers (None: all)."""

    def __init__(
        self,
        cfg: TrainConfig,
        version: int = 0,
        tasks_drawn: list[int] | None = None,
        *,
        groups: Groups = informative,
        eval_rewards: list[float] | None = None,
        on_learn: Callable[[int], None] | None = None,
        kills: Kills | None = None,
        room: int | None = None,
        start_room: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.version = version
        self.admitted = version
        """The policy version rollouts are admitted for."""
        self.learner_steps = 0
        self.groups = groups
        self.eval_rewards = list(eval_rewards or [])
        self.on_learn = on_learn
        self.tasks_drawn = list(tasks_drawn or [0] * cfg.ray.rollout_workers)
        self.calls: list[str] = []
        self.given_back = 0
        self.saved_models: list[tuple[Path, dict[str, Any]]] = []
        self.closed = False
        self.kills = kills or Kills()
        self.dead_workers: set[int] = set()
        self.workers = set(range(cfg.ray.rollout_workers))
        """The ranks with a worker (dead or alive): a rank given up has none."""
        self.room = room
        self.start_room = start_room
        self.learner_dead = False
        self.replaced: list[tuple[list[int], int, list[int]]] = []
        """Each replacement: the ranks, the policy version, and the tasks drawn then."""
        self.taken_back: list[tuple[list[int], int]] = []
        """Each take back: the ranks, and the policy version their engines got."""
        self.asked_for_room = 0
        self.waiting: list[list[Trajectory]] = []
        """Finished groups in the queue, handed out before `groups(version)`'s."""
        self.held = 0
        """Places taken in the admission gate by groups carried into the session."""

    async def start(self) -> None:
        self.calls.append("start")
        if self.start_room is not None:
            self.workers = set(range(min(self.start_room, self.cfg.ray.rollout_workers)))

    def given_up(self) -> list[int]:
        return [rank for rank in range(self.cfg.ray.rollout_workers) if rank not in self.workers]

    async def open_weight_sync(self) -> bool:
        return False

    def run_workers(self) -> None:
        self.calls.append("run_workers")

    def stop_workers(self) -> None:
        self.calls.append("stop_workers")

    async def aclose(self) -> None:
        self.closed = True

    async def take_groups(self, most: int, timeout_s: float) -> list[list[Trajectory]]:
        await asyncio.sleep(0)
        if self.version in self.kills.worker_at:
            self.kills.worker_at.remove(self.version)
            self.dead_workers.add(self.kills.worker_rank)
        if self.dead_workers:
            raise TimeoutError("no trajectory arrived")
        if self.waiting:
            got, self.waiting = self.waiting[:most], self.waiting[most:]
            return got
        got = self.groups(self.version)[:most]
        if not got:
            raise TimeoutError("no trajectory arrived")
        self.tasks_drawn = [
            n + len(got) if rank in self.workers else n for rank, n in enumerate(self.tasks_drawn)
        ]
        return got

    async def give_back(self, groups: int) -> None:
        self.given_back += groups

    def check_workers(self) -> None:
        if self.dead_workers:
            raise ProcessDied(f"rollout worker {min(self.dead_workers)} died")
        if self.room_again():
            raise ClusterNews("news")

    def queue_depth(self) -> int:
        return len(self.waiting)

    async def queued(self) -> list[list[Trajectory]]:
        return list(self.waiting)

    async def hold_places(self, groups: int) -> None:
        self.held += groups

    async def learn(self, batch: TrainBatch) -> dict[str, float]:
        if self.learner_steps + 1 in self.kills.learner_at:
            self.kills.learner_at.remove(self.learner_steps + 1)
            self.learner_dead = True
            raise ProcessDied("the learner died")
        self.learner_steps += 1
        if self.on_learn is not None:
            self.on_learn(self.learner_steps)
        return {"loss": 0.5}

    async def send_weights(self, version: int) -> float:
        self.version = version
        return 0.25

    async def admit_version(self, version: int) -> None:
        self.admitted = version

    async def worker_stats(self) -> list[WorkerStats | None]:
        return [
            WorkerStats(n, 10 * n, self.version) if rank in self.workers else None
            for rank, n in enumerate(self.tasks_drawn)
        ]

    async def evaluate(self, cfg: HeldOutConfig) -> dict[str, Any]:
        return evaluation(self.eval_rewards.pop(0) if self.eval_rewards else 0.5)

    async def save_checkpoint(self, directory: Path, tag: str) -> None:
        _write(directory / tag / "steps", str(self.learner_steps))

    async def save_model(self, directory: Path, about: dict[str, Any]) -> None:
        _write(directory / MODEL_CHECKPOINT, json.dumps(about))
        self.saved_models.append((directory, about))

    async def load_checkpoint(self, directory: Path, tag: str) -> int:
        self.learner_steps = int(_read(directory / tag / "steps"))
        return self.learner_steps

    async def lost(self) -> Lost:
        learner = ProcessDied("the learner died") if self.learner_dead else None
        return Lost(learner, {rank: ProcessDied("killed") for rank in self.dead_workers})

    async def replace_workers(self, ranks: list[int], version: int) -> Replaced:
        """Two episodes of each dead worker were in flight."""
        placed = ranks if self.room is None else ranks[: self.room]
        if self.room is not None:
            self.room -= len(placed)
        given_up = [rank for rank in ranks if rank not in placed]
        self.dead_workers.difference_update(ranks)
        self.workers.difference_update(given_up)
        self.version = version
        self.replaced.append((placed, version, list(self.tasks_drawn)))
        return Replaced(2 * len(ranks), given_up, len(self.workers))

    async def episodes_in_flight(self) -> int:
        return 4

    def room_again(self) -> bool:
        if self.given_up():
            self.asked_for_room += 1
        return bool(self.given_up()) and (self.room is None or self.room > 0)

    async def take_back(self, version: int) -> list[int]:
        back = self.given_up()[: self.room]
        if self.room is not None:
            self.room -= len(back)
        self.workers.update(back)
        self.version = version
        self.taken_back.append((back, version))
        return back


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _read(path: Path) -> str:
    return path.read_text()


class SlowLearner(FakeCluster):
    """A learner step that yields to the event loop while it trains (`learning` meanwhile),
    as a remote learner call does: the driver's work can run during it."""

    learning = False

    async def learn(self, batch: TrainBatch) -> dict[str, float]:
        self.learning = True
        await settle(20)
        self.learning = False
        return await super().learn(batch)
