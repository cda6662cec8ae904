"""Recovery from a lost process: a rollout worker that died is replaced in the running
session (or, when the cluster has no room for it in time, as after the loss of its node, the
run goes on without it, and takes it back once a node has room); a learner that died (any one
of its ranks: the others wait on it in every collective) ends the session, and the driver
starts a new one, every rank new, from the last checkpoint (`LearnerLost`). Both are counted
and bounded by `Faults`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from agenthub._errors import AgentHubError
from agenthub.agents import Trajectory
from agenthub.trainer._cluster import Cluster, ClusterNews, Replaced
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._control import Faults
from agenthub.trainer._publisher import WeightPublisher

__all__ = ["LearnerLost", "Outcome", "Recovery"]

Outcome = Literal["go_on", "learner_dead", "failed"]
"""After an error: the run goes on (dead workers replaced), the learner is dead beyond its
budget (nothing left to checkpoint), or the run fails (with `Recovery.cause`, or else with
the error itself)."""

SETTLE_S = 180.0
"""How long a weight sync in flight when a worker died may take to fail (a broadcast to a
dead peer ends at the transfer group's timeout at the latest)."""


class LearnerLost(Exception):
    """The learner died and may be restarted: the session ends here, and the run goes on in a
    new one from the last checkpoint. `episodes` were playing then, and are lost with it;
    the finished `groups` the driver still had go on to the new session."""

    def __init__(self, cause: BaseException, episodes: int, step: int) -> None:
        super().__init__(f"the learner died at step {step}: {cause}")
        self.cause = cause
        self.episodes = episodes
        self.step = step
        self.groups: list[list[Trajectory]] = []


class Recovery:
    """Told of an error that ended a run's steps, finds whether a process of the run died
    and, within the fault budget, brings the run back."""

    def __init__(self, faults: Faults, cfg: TrainConfig, how_to_go_on: Callable[[], str]) -> None:
        self.faults = faults
        self.how_to_go_on = how_to_go_on
        """The sentence that tells how to continue the run from its checkpoint."""
        self.rollout_workers = cfg.ray.rollout_workers
        self.placement_timeout_s = cfg.run.worker_placement_timeout_s
        self.workers = self.rollout_workers
        """The rollout workers the session has (fewer once a lost one is given up)."""
        self._given_up: list[int] = []
        """The ranks given up when the last workers were: the run cannot go on."""

    def new_session(self) -> None:
        """A new session starts every rollout worker again."""
        self.workers = self.rollout_workers

    def started(self, cluster: Cluster) -> None:
        """After `cluster.start()`: the run starts with the workers placed, saying which were
        not; with none, it cannot start."""
        given_up = cluster.given_up()
        if not given_up:
            return
        self.workers = self.rollout_workers - len(given_up)
        if not self.workers:
            raise AgentHubError(
                f"no rollout worker could start: {self._no_room()} for any of the "
                f"{self.rollout_workers} (each needs a CPU, ray.worker_num_gpus GPUs and "
                "ray.worker_resources), as when a node of the cluster is lost. Add a node to "
                "the Ray cluster or free room on one, or give the workers longer with a larger "
                f"run.worker_placement_timeout_s. {self.how_to_go_on()}"
            )
        self.faults.log(
            f"rollout worker {_named(given_up)} not placed ({self._no_room()}): the run starts "
            f"with {self.workers} of {self.rollout_workers} rollout workers, and takes "
            f"{'them' if len(given_up) > 1 else 'it'} back once a node has room"
        )

    async def _take_in(self, cluster: Cluster, publisher: WeightPublisher, step: int) -> None:
        """After `ClusterNews` at step `step`: take back the ranks given up whose new worker
        found room, with the weights of `step` (the sync in flight ended first)."""
        if not cluster.room_again():
            return
        await publisher.wait(admitted=True)
        back = await cluster.take_back(step)
        if back:
            self.workers += len(back)
            self.faults.log(
                f"rollout worker {_named(back)} back: {self.workers} of "
                f"{self.rollout_workers} rollout workers"
            )

    async def recover(
        self, cluster: Cluster, publisher: WeightPublisher, error: Exception, step: int
    ) -> Outcome:
        """Whether the run can go on at `step` after `error`, with dead rollout workers
        replaced; a learner dead and to be restarted raises `LearnerLost`. `ClusterNews` is
        taken in (a worker back), and the run goes on."""
        if isinstance(error, ClusterNews):
            await self._take_in(cluster, publisher, step)
            return "go_on"
        lost = await cluster.lost()
        if lost.learner is not None:
            if not self.faults.learner_lost(lost.learner):
                return "learner_dead"
            raise LearnerLost(lost.learner, await cluster.episodes_in_flight(), step) from error
        if not lost.workers:
            return "failed"
        if not all(self.faults.worker_lost(rank, e) for rank, e in sorted(lost.workers.items())):
            return "failed"
        if not await publisher.settle(SETTLE_S):
            return "failed"
        ranks = sorted(lost.workers)
        replaced = await cluster.replace_workers(ranks, step)
        self.workers = replaced.workers
        if not replaced.workers:
            self._given_up = replaced.given_up
            return "failed"
        # Only the episodes it was playing: the groups it had queued are the queue's.
        self.faults.survived(replaced.episodes_lost, self._said(ranks, replaced, step))
        return "go_on"

    def _said(self, ranks: list[int], replaced: Replaced, step: int) -> str:
        """The fault line's account of the workers: replaced, or given up."""
        back = [rank for rank in ranks if rank not in replaced.given_up]
        said = []
        if back:
            said.append(
                f"rollout worker {_named(back)} replaced, its engine at policy version {step}"
            )
        if replaced.given_up:
            said.append(
                f"rollout worker {_named(replaced.given_up)} not replaced ({self._no_room()}): "
                f"{replaced.workers} of {self.rollout_workers} rollout workers left"
            )
        return "; ".join(said)

    def stop_error(self) -> AgentHubError | None:
        """After a "failed" outcome: the error the run stops with, once checkpointed, where it
        is not the one `recover` was told of (None): its last workers could not be replaced."""
        if not self._given_up:
            return None
        return AgentHubError(
            f"no rollout worker is left: rollout worker {_named(self._given_up)} died and "
            f"{self._no_room()}, as when the Ray node it ran on is lost. Add a node to the "
            "Ray cluster or free room on one before the run goes on, or give a replacement "
            "longer with a larger run.worker_placement_timeout_s. "
            f"{self.how_to_go_on()}"
        )

    def _no_room(self) -> str:
        """Why a lost worker was given up."""
        return (
            "the Ray cluster had no room for a new worker within "
            f"run.worker_placement_timeout_s={self.placement_timeout_s:g} s"
        )


def _named(ranks: list[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)
