"""The next learner step's batch, assembled while the learner trains on the current one."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from agenthub.trainer._assembly import Batch, BatchAssembler
from agenthub.trainer._config import AlgorithmConfig

if TYPE_CHECKING:
    from agenthub.trainer._batch import TrainBatch

__all__ = ["NextBatch"]


class NextBatch:
    """The next learner step's batch, assembled and collated while the learner trains on the
    current one, so that the driver's own work on it (taking the groups off the queue, judging
    them, computing advantages) is off the learner's critical path.

    `start(version)` begins the batch for the learner at policy `version`; `take()` waits for
    it and returns it with its `TrainBatch`, or None when the run stops first, the batch's
    `wait_s` then being how long the learner, free, waited for it (not the time the groups
    took to come while it trained). The verdicts are those of assembling after the step: a
    group is judged against `version`, the policy it will be trained by.

    The batch under way outlives an error the run recovers from. `take()` raises an error of
    the assembly itself (a dead worker found while it waited for groups); `pause()` lets it
    stop between two takes off the queue, since a take cut short loses the groups it took
    off and their admission places. Either way the groups in hand stay with the assembler,
    and the next `start` goes on with them; a batch finished meanwhile waits here for
    `take`. Only `cancel()`, when the run ends, cuts a take short."""

    def __init__(
        self,
        assembler: BatchAssembler,
        algo: AlgorithmConfig,
        deadline: float,
    ) -> None:
        self.assembler, self.algo, self.deadline = assembler, algo, deadline
        self._task: asyncio.Task[tuple[Batch, TrainBatch] | None] | None = None
        self._pausing = False

    @property
    def started(self) -> bool:
        """Whether a batch is under way, or finished and not taken."""
        return self._task is not None

    @property
    def ready(self) -> bool:
        """Whether a batch is assembled, for `take()` to return at once."""
        task = self._task
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return False
        return task.result() is not None

    async def assembled(self) -> None:
        """Wait for the batch under way to be assembled, or to end without one, and leave it
        for `take()`. Cancelling the wait leaves the assembly going."""
        if self._task is not None:
            await asyncio.wait({self._task})

    def start(self, version: int) -> None:
        assert self._task is None, "the batch started before is not taken yet"
        self._task = asyncio.ensure_future(self._assemble(version))

    async def _assemble(self, version: int) -> tuple[Batch, TrainBatch] | None:
        batch = await self.assembler.assemble(version, self.deadline, paused=lambda: self._pausing)
        return None if batch is None else (batch, batch.collate(self.algo))

    async def take(self) -> tuple[Batch, TrainBatch] | None:
        assert self._task is not None, "no batch was started"
        waited = self.assembler.clock()
        task, self._task = self._task, None
        ready = await task
        if ready is not None:
            ready[0].wait_s = self.assembler.clock() - waited
            self.assembler.handed()
        return ready

    async def cancel(self) -> None:
        """Stop assembling (the run ends): groups taken meanwhile are not trained, like
        those left in the queue."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    async def pause(self) -> None:
        """Let the batch under way stop at its next take off the queue (within the take's
        timeout), keeping a batch that is finished. Its own error, if it failed meanwhile, is
        dropped: it is the fault being recovered from, or it comes again."""
        task = self._task
        if task is None:
            return
        self._pausing = True
        try:
            await asyncio.wait({task})
        finally:
            self._pausing = False
        if task.cancelled() or task.exception() is not None or task.result() is None:
            self._task = None
