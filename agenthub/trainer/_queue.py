"""The bounded queue between rollout workers and the learner."""

from __future__ import annotations

import contextlib
import pickle
import time
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import anyio

T = TypeVar("T")


class TrajectoryQueue(Generic[T]):
    """A bounded `ray.util.queue.Queue` used a batch at a time.

    Every queue operation is a call to the queue's actor (a fraction of a millisecond at
    best), so items cross in batches: `put_batch` is one call when there is room, and
    `get_batch` takes up to `max_items` in at most three. The items themselves live in the
    queue's actor, not in the object store of the process that put them: a rollout worker's
    object dies with its process (or node), and a finished group must outlive the worker that
    played it. Each item crosses pickled, as bytes the actor holds without unpickling them
    (unpickled there and pickled again, a batch of trajectories went 3x slower). Both calls
    are coroutines that never block the caller's event loop; `put_batch` waits while the
    queue is full, which is the back-pressure that pauses rollout workers when the learner
    falls behind. `snapshot` reads what is queued without taking it (for a checkpoint). The
    queue can be handed to other Ray actors (it pickles as its actor handle).
    """

    def __init__(
        self, maxsize: int, *, actor_options: dict[str, Any] | None = None, poll_s: float = 0.005
    ) -> None:
        from ray.util.queue import Queue

        if maxsize < 1:
            raise ValueError(f"the trajectory queue must be bounded (maxsize >= 1), got {maxsize}")
        self.maxsize = maxsize
        self.poll_s = poll_s
        self._queue = Queue(maxsize=maxsize, actor_options=actor_options or {})
        self._actor: Any = self._queue.actor  # a Ray actor handle; typed loosely by Ray

    async def put_batch(self, items: Sequence[T], *, timeout_s: float | None = None) -> None:
        """Add all `items` at once, waiting for room; `TimeoutError` after `timeout_s`. Once
        this returns, the items are the queue's: the caller may die."""
        from ray.util.queue import Full

        if len(items) > self.maxsize:
            raise ValueError(f"a batch of {len(items)} can never fit a queue of {self.maxsize}")
        if not items:
            return
        import ray

        # Put once, passed by reference on every retry; the actor holds the bytes themselves.
        ref = ray.put([pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL) for item in items])
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        delay = self.poll_s
        while True:
            try:
                await self._actor.put_nowait_batch.remote(ref)
                return
            except Full:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"the trajectory queue stayed full for {timeout_s:g} s"
                    ) from None
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.1)

    async def get_batch(self, max_items: int, *, timeout_s: float | None = None) -> list[T]:
        """Wait for at least one item, then take up to `max_items` without waiting more."""
        from ray.util.queue import Empty

        try:
            first = await self._queue.get_async(block=True, timeout=timeout_s)
        except Empty:
            raise TimeoutError(f"no trajectory arrived within {timeout_s:g} s") from None
        got: list[bytes] = [first]
        more = min(max_items - 1, await self._actor.qsize.remote())
        if more > 0:
            with contextlib.suppress(Empty):  # another consumer may have taken them first
                got += await self._actor.get_nowait_batch.remote(more)
        return [pickle.loads(item) for item in got]

    async def snapshot(self) -> list[T]:
        """The items queued now, oldest first, left in the queue."""
        items: list[bytes] = await self._actor.__ray_call__.remote(lambda q: list(q.queue._queue))
        return [pickle.loads(item) for item in items]

    def qsize(self) -> int:
        return int(self._queue.qsize())

    def shutdown(self) -> None:
        self._queue.shutdown()
