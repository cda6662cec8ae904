"""A session's learner steps: take the batch, learn, publish the weights, log.

The next step's batch is assembled while the learner trains (`NextBatch`). When it is ready
as a step ends, it goes to the learner at once, behind that step's weight sync: the learner
runs its calls in the order they are made, so it goes from the sync to the next step without
waiting for the driver, whose own work on the step (its metrics, samples, checkpoint and
evaluation) runs meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agenthub.trainer._assembly import Batch, BatchAssembler
from agenthub.trainer._checkpoint import Checkpointer
from agenthub.trainer._cluster import Cluster
from agenthub.trainer._config import TrainConfig
from agenthub.trainer._control import RunControl
from agenthub.trainer._evaluation import HeldOutEvaluator
from agenthub.trainer._metrics import MetricsLog, StepRecord, StepTiming
from agenthub.trainer._next_batch import NextBatch
from agenthub.trainer._publisher import WeightPublisher
from agenthub.trainer._rundir import RunDirectory

if TYPE_CHECKING:
    from agenthub.trainer._batch import TrainBatch

__all__ = ["Clock", "Parts", "Progress", "Steps"]

CLOSE_S = 10.0
"""How long the batch under way may take to stop when the session ends (a take off the queue
waits a second at most)."""


@dataclass
class Parts:
    """One session's parts, over its cluster."""

    cluster: Cluster
    metrics: MetricsLog
    assembler: BatchAssembler
    publisher: WeightPublisher
    evaluator: HeldOutEvaluator
    checkpointer: Checkpointer


class Clock:
    """The run's time, counting earlier sessions', and its `max_minutes` deadline."""

    def __init__(self, elapsed_before: float, max_minutes: float | None) -> None:
        self.started = time.monotonic() - elapsed_before
        self.deadline = math.inf if max_minutes is None else self.started + max_minutes * 60

    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass
class _Learning:
    """A learner step asked for: its batch, the call, when the driver began the step and
    when it asked for it (`queued`: behind the last step's weight sync)."""

    batch: Batch
    call: asyncio.Future[dict[str, float]]
    step_start: float
    learn_start: float
    queued: bool

    def failed(self) -> bool:
        call = self.call
        return call.done() and (call.cancelled() or call.exception() is not None)


class _TokenRate:
    """Generated tokens per second between one step's record and the next."""

    def __init__(self, tokens: int) -> None:
        self.tokens, self.time = tokens, time.monotonic()

    def update(self, tokens: int, now: float) -> float:
        # A lost worker's tokens leave the sum (a replacement counts from 0): never below 0.
        rate = max(tokens - self.tokens, 0) / max(now - self.time, 1e-9)
        self.tokens, self.time = tokens, now
        return rate


@dataclass
class Progress:
    """Where the session stands: the learner's step, the last step whose metrics are
    written, and the learner step asked for and not yet counted (the learner's state is then
    not a step's)."""

    step: int
    logged: int
    under_way: _Learning | None = None
    rate: _TokenRate = field(default_factory=lambda: _TokenRate(0))

    @property
    def learning(self) -> bool:
        return self.under_way is not None


class Steps:
    """The session's step loop (`run`) over its `parts`, from `at`. `report` is told of
    every step logged, once its checkpoint is saved and its evaluation started."""

    def __init__(
        self,
        config: TrainConfig,
        parts: Parts,
        at: Progress,
        clock: Clock,
        *,
        control: RunControl,
        rundir: RunDirectory,
        report: Callable[[StepRecord], None],
    ) -> None:
        self.config, self.p, self.at, self.clock = config, parts, at, clock
        self.control, self.dir, self.report = control, rundir, report
        self.upcoming = NextBatch(parts.assembler, config.algorithm, clock.deadline)
        self._queuing: asyncio.Task[None] | None = None
        """Asks for the next step, behind the last sync, once its batch is assembled."""

    async def run(self) -> None:
        """Batch, learn, publish the weights, log; until `max_steps` or a stop, the step
        asked for last counted. A step's batch is taken once the sync before it ended (a
        failed sync leaves the batch there), unless it was ready and queued behind it."""
        cfg, p, at = self.config, self.p, self.at
        at.rate = _TokenRate(await _generated_tokens(p.cluster))
        if at.under_way is not None and at.under_way.failed():  # recovered from: not counted
            at.under_way = None
        while (
            at.learning
            or self._queuing is not None
            or (at.step < cfg.run.max_steps and not self.control.stopping)
        ):
            if self._queuing is not None:
                await self._queuing
                self._queuing = None
            if at.under_way is None:
                step_start = time.monotonic()
                await p.publisher.wait()
                if not self.upcoming.started:
                    self.upcoming.start(at.step)
                ready = await self.upcoming.take()
                if ready is None:
                    break
                self._learn(ready, step_start, queued=False)
            learning = at.under_way
            assert learning is not None
            learned = await learning.call
            learn_s = await self._count_step(learning)
            failed = p.publisher.failed()
            if failed is not None:  # the sync before this step: the step is logged first
                await self._log_step(learning, learned, learn_s)
                raise failed
            sync = p.publisher.publish(at.step)
            if cfg.algorithm.max_staleness == 0:
                # Synchronous: the next rollouts need these weights. A failed sync is raised
                # where the next batch waits, once this step's metrics are written.
                await asyncio.wait({sync})
            elif self._may_queue():
                self._queuing = asyncio.ensure_future(self._queue_next())
            record = await self._log_step(learning, learned, learn_s)
            await self._after_step(record, sync)
            p.cluster.check_workers()  # a dead worker is replaced now, not when groups run out

    async def _queue_next(self) -> None:
        """Ask the learner for the next step once its batch is assembled (the driver's work
        on the step before goes on meanwhile); none if the batch does not come."""
        await self.upcoming.assembled()
        if self.upcoming.ready:  # no wait from here to the call
            ready = await self.upcoming.take()
            assert ready is not None
            sync, now = self.p.publisher.pending, time.monotonic()
            # The learner, free once the sync ended, waited for the batch since: the step
            # began then.
            free = self.p.publisher.sent_at if sync is not None and sync.done() else now
            ready[0].wait_s = max(now - free, 0.0)
            self._learn(ready, min(free, now), queued=True)

    async def settle(self) -> None:
        """Before a recovery: ask for no next step, let the batch under way stop between two
        takes off the queue (`NextBatch.pause`), wait for the learner step asked for, and
        count and log it if it ended well (the recovery's weight sync then carries that step
        under its version)."""
        await self._stop_queuing()
        await self.upcoming.pause()
        learning = self.at.under_way
        if learning is None:
            return
        await asyncio.wait({learning.call})
        if learning.failed():
            return  # the learner's state is no step's: nothing is saved from it
        learn_s = await self._count_step(learning)
        await self._log_step(learning, learning.call.result(), learn_s)

    async def close(self) -> None:
        """The session ends: the batch under way stops between two takes off the queue, its
        groups kept for the last checkpoint (or cancelled after `CLOSE_S`)."""
        await self._stop_queuing()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.upcoming.pause(), CLOSE_S)
        await self.upcoming.cancel()

    async def _stop_queuing(self) -> None:
        queuing, self._queuing = self._queuing, None
        if queuing is not None:
            queuing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await queuing

    def _learn(
        self, ready: tuple[Batch, TrainBatch] | None, step_start: float, *, queued: bool
    ) -> None:
        """Ask the learner for a step on `ready`, and start the batch after it."""
        assert ready is not None
        batch, collated = ready
        self.p.checkpointer.since += batch.groups
        call = asyncio.ensure_future(self.p.cluster.learn(collated))
        self.at.under_way = _Learning(batch, call, step_start, time.monotonic(), queued)
        if self.at.step + 1 < self.config.run.max_steps:
            self.upcoming.start(self.at.step + 1)

    def _may_queue(self) -> bool:
        """Whether the next step may go to the learner before this one is logged: not when
        the run stops after it, nor when a checkpoint of this step is due (saved by the
        learner, it must not follow a later step)."""
        run, step = self.config.run, self.at.step
        due = step % run.checkpoint_every == 0
        return step < run.max_steps and not self.control.stopping and not due

    async def _count_step(self, learning: _Learning) -> float:
        """Count the learner's step just ended; how long it computed. A step queued behind a
        sync began once it was asked for and the sync had ended (waited for here: it ended
        before the step began)."""
        ended = time.monotonic()
        self.at.under_way, self.at.step = None, self.at.step + 1
        if not learning.queued:
            return ended - learning.learn_start
        await self.p.publisher.sent()  # the last sync to end: the driver heard it at `sent_at`
        return ended - max(learning.learn_start, self.p.publisher.sent_at)

    async def _log_step(
        self, learning: _Learning, learned: dict[str, float], learn_s: float
    ) -> StepRecord:
        """Write step `at.step`'s metrics and its sample trajectories."""
        p, step, now = self.p, self.at.step, time.monotonic()
        tokens = await _generated_tokens(p.cluster)
        timing = StepTiming(
            step_s=now - learning.step_start,
            learn_s=learn_s,
            sync_s=p.publisher.sync_s,
            time_s=now - self.clock.started,
            tokens_per_s=self.at.rate.update(tokens, now),
            queued=learning.queued,
        )
        record = learning.batch.record(
            step, learned, queue_depth=p.cluster.queue_depth(), timing=timing
        )
        p.metrics.log(record.to_json())
        self.at.logged = step
        self.dir.save_samples(learning.batch.groups, self.config.run.save_trajectories)
        return record

    async def _after_step(self, record: StepRecord, sync: asyncio.Task[None]) -> None:
        """Checkpoint, evaluate and plot when due, and report the step."""
        p, run, step = self.p, self.config.run, record.step
        if step % run.checkpoint_every == 0:
            await p.checkpointer.save(step, record.time_s)
        if p.evaluator.due(step, run.max_steps):
            p.evaluator.start(step, after=sync)
        if step % 5 == 0:
            p.metrics.plot()
        self.report(record)


async def _generated_tokens(cluster: Cluster) -> int:
    # A dead worker is noticed, and its error raised, where the batch waits for it.
    return sum(s.generated_tokens for s in await cluster.worker_stats() if s is not None)
