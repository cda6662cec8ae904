"""Weight publishing: each learner step's weights sent to every engine under the next policy
version while the learner goes on, and rollouts admitted for it once they are sent."""

from __future__ import annotations

import asyncio
import time

from agenthub.trainer._cluster import Cluster

__all__ = ["WeightPublisher"]


class WeightPublisher:
    """Sends the learner's weights as a new policy version, one sync at a time, in the
    background (`publish`) or at once (`publish_now`).

    A sync in the background ends when the weights are sent: the learner may step again at
    once, and a step asked for while the sync is under way runs after it on the learner (the
    sync's task, made first, makes its call first; see `Cluster.learn`). Rollouts are
    admitted for the new version after that (`admitting`), off the learner's path, in the
    order the versions were sent: every engine has received its weights by then, and one
    still ending the round holds new requests until it serves them."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sync_s = 0.0
        """How long the last finished sync took."""
        self.pending: asyncio.Task[None] | None = None
        """The last sync started in the background (its weights sent)."""
        self.sent_at = 0.0
        """When the driver heard that the last finished sync ended (`time.monotonic`)."""
        self.admitting: asyncio.Task[None] | None = None
        """Rollouts admitted for the last version sent."""

    async def publish_now(self, version: int) -> None:
        """Send the weights as `version`, then admit rollouts for it."""
        self.sync_s = await self.cluster.send_weights(version)
        await self.cluster.admit_version(version)

    def publish(self, version: int) -> asyncio.Task[None]:
        self.pending = asyncio.create_task(self._send(version))
        return self.pending

    async def _send(self, version: int) -> None:
        self.sync_s = await self.cluster.send_weights(version)
        self.sent_at = time.monotonic()
        self.admitting = asyncio.create_task(self._admit(version, self.admitting))

    async def _admit(self, version: int, before: asyncio.Task[None] | None) -> None:
        """Admit rollouts for `version` once the admission of the version before it ended:
        versions are admitted in order, and an admission's failure is never dropped."""
        if before is not None:
            await before
        await self.cluster.admit_version(version)

    async def sent(self) -> None:
        """Wait for the last sync to end, well or not (`failed` says which)."""
        if self.pending is not None:
            await asyncio.wait({self.pending})

    def failed(self) -> BaseException | None:
        """The error of the last sync, if it ended in one."""
        sync = self.pending
        if sync is None or not sync.done() or sync.cancelled():
            return None
        return sync.exception()

    async def wait(self, *, admitted: bool = False) -> None:
        """Wait for the last sync: the learner sends a step's weights before it can step
        again (one call at a time), and a sync that failed stops the run here. With
        `admitted`, also until rollouts are admitted for its version."""
        if self.pending is not None:
            await self.pending
        admitting = self.admitting
        if admitting is not None and (admitted or admitting.done()):
            await admitting

    def check(self) -> None:
        """Raise the error of a sync that failed: it leaves engines holding their requests,
        so no rollouts come while a batch waits for them."""
        for task in (self.pending, self.admitting):
            if task is not None and task.done() and not task.cancelled():
                task.result()

    def forget_failure(self) -> None:
        """Mark a failed sync's error as seen (one into a dead engine, after the failure that
        stops the run: not news)."""
        for task in (self.pending, self.admitting):
            if task is not None and task.done() and not task.cancelled():
                task.exception()

    async def settle(self, timeout_s: float) -> bool:
        """Let the sync in flight end (one into a dead engine fails, or is cut by the transfer
        group's timeout) and its admission, their failures seen, and forget them; False when
        either is still running after `timeout_s` (each)."""
        sync = self.pending
        if sync is not None:
            await asyncio.wait({sync}, timeout=timeout_s)
            if not sync.done():
                return False
        admitting = self.admitting  # started once the weights were sent
        if admitting is not None:
            await asyncio.wait({admitting}, timeout=timeout_s)
            if not admitting.done():
                return False
        self.forget_failure()
        self.pending = self.admitting = None
        return True
