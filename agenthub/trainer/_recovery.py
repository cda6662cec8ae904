"""Recovery from a lost process: a rollout worker that died is replaced in the running
session; a learner that died (any one of its ranks: the others wait on it in every collective)
ends the session, and the driver starts a new one, every rank new, from the last checkpoint
(`LearnerLost`). Both are counted and bounded by `Faults`."""

from __future__ import annotations

from typing import Literal

from agenthub.trainer._cluster import Cluster
from agenthub.trainer._control import Faults
from agenthub.trainer._publisher import WeightPublisher

__all__ = ["LearnerLost", "Outcome", "Recovery"]

Outcome = Literal["go_on", "learner_dead", "failed"]
"""After an error: the run goes on (dead workers replaced), the learner is dead beyond its
budget (nothing left to checkpoint), or the error stands."""

SETTLE_S = 180.0
"""How long a weight sync in flight when a worker died may take to fail (a broadcast to a
dead peer ends at the transfer group's timeout at the latest)."""


class LearnerLost(Exception):
    """The learner died and may be restarted: the session ends here, and the run goes on in a
    new one from the last checkpoint. `episodes` were in flight then, and are lost with it."""

    def __init__(self, cause: BaseException, episodes: int, step: int) -> None:
        super().__init__(f"the learner died at step {step}: {cause}")
        self.cause = cause
        self.episodes = episodes
        self.step = step


class Recovery:
    """Told of an error that ended a run's steps, finds whether a process of the run died
    and, within the fault budget, brings the run back."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults

    async def recover(
        self, cluster: Cluster, publisher: WeightPublisher, error: Exception, step: int
    ) -> Outcome:
        """Whether the run can go on at `step` after `error`, with dead rollout workers
        replaced; a learner dead and to be restarted raises `LearnerLost`."""
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
        episodes = await cluster.replace_workers(ranks, step)
        named = ", ".join(str(rank) for rank in ranks)
        self.faults.survived(
            episodes, f"rollout worker {named} replaced, its engine at policy version {step}"
        )
        return "go_on"
