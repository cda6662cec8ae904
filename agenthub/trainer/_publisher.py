"""Weight publishing: each learner step's weights sent to every engine under the next policy
version, while the learner goes on."""

from __future__ import annotations

import asyncio

from agenthub.trainer._cluster import Cluster

__all__ = ["WeightPublisher"]


class WeightPublisher:
    """Sends the learner's weights as a new policy version, one sync at a time, in the
    background (`publish`) or at once (`publish_now`)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.sync_s = 0.0
        """How long the last finished sync took."""
        self.pending: asyncio.Task[None] | None = None
        """The last sync started in the background."""

    async def publish_now(self, version: int) -> None:
        """Send the weights as `version`, then admit rollouts for it."""
        self.sync_s = await self.cluster.publish(version)

    def publish(self, version: int) -> asyncio.Task[None]:
        self.pending = asyncio.create_task(self.publish_now(version))
        return self.pending

    async def wait(self) -> None:
        """Wait for the last sync: the learner sends a step's weights before it can step
        again (one call at a time), and a sync that failed stops the run here."""
        if self.pending is not None:
            await self.pending

    def check(self) -> None:
        """Raise the error of a sync that failed: it leaves engines holding their requests,
        so no rollouts come while a batch waits for them."""
        sync = self.pending
        if sync is not None and sync.done() and not sync.cancelled():
            sync.result()

    def forget_failure(self) -> None:
        """Mark a failed sync's error as seen (one into a dead engine, after the failure that
        stops the run: not news)."""
        sync = self.pending
        if sync is not None and sync.done() and not sync.cancelled():
            sync.exception()

    async def settle(self, timeout_s: float) -> bool:
        """Let the sync in flight end (one into a dead engine fails, or is cut by the transfer
        group's timeout), its failure seen, and forget it; False when it is still running after
        `timeout_s`."""
        sync = self.pending
        if sync is None:
            return True
        await asyncio.wait({sync}, timeout=timeout_s)
        if not sync.done():
            return False
        self.forget_failure()
        self.pending = None
        return True
