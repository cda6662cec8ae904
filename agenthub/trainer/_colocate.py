"""`ray.colocate`: the learner and the rollout engine take turns on one GPU.

Between rollout phases the engine sleeps at vLLM's level 2, which frees its weights and its
KV cache rather than copying the weights to host memory (level 1): every turn ends by sending
the learner's new weights into the engine anyway, so a copy of the old ones kept on the host
would be 1 GiB (0.5B, bf16) to 140 GiB (70B) of host memory and two PCIe copies a step for
nothing. The order is what keeps level 2 safe: vLLM samples garbage from weights woken from
level 2 and not reloaded (vLLM issue 29341), so the weights wake first, are loaded over CUDA
IPC, and only then does the KV cache wake and the held requests go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

__all__ = ["SLEEP_LEVEL", "GpuTurns", "SleepingEngine"]

SLEEP_LEVEL = 2
T = TypeVar("T")
R = TypeVar("R")


class SleepingEngine(Protocol):
    """What a colocated engine offers (`VLLMEngine.sleep` / `wake_up`, or a rollout worker's
    actor forwarding them)."""

    async def sleep(self, level: int) -> None: ...

    async def wake_up(self, tags: list[str] | None) -> None: ...


class GpuTurns:
    """The learner's turns on a GPU shared with a rollout engine. A turn is the learner's
    `step` (the engine sleeps through it, its requests held where they are, and its weights
    wake after it) and the weight `sync` that follows (the new weights sent into the engine,
    then its KV cache wakes and the held requests go on, on the new weights). A step waits for
    the sync before it to end, so the engine never sleeps in the middle of taking weights;
    a step that fails still wakes the engine's weights, to be filled by the next sync (a
    recovery's). A sync with no step before it (the first weights, a recovery's) finds the
    engine awake and leaves it so."""

    def __init__(self, engine: SleepingEngine, level: int = SLEEP_LEVEL) -> None:
        if level not in (1, 2):
            raise ValueError(f"vLLM sleeps at level 1 or 2, not {level}")
        self.engine = engine
        self.level = level
        self._synced = asyncio.Event()
        self._synced.set()
        self._asleep = False  # the KV cache sleeps: a step ended and its sync has not

    async def step(self, step: Callable[[], Awaitable[T]]) -> T:
        await self._synced.wait()
        self._synced.clear()
        await self.engine.sleep(self.level)
        self._asleep = True
        try:
            return await step()
        finally:
            await self.engine.wake_up(["weights"])

    async def sync(self, sync: Callable[[], Awaitable[R]]) -> R:
        try:
            return await sync()
        finally:
            if self._asleep:
                await self.engine.wake_up(["kv_cache"])
                self._asleep = False
            self._synced.set()

    async def learner_turn(
        self, step: Callable[[], Awaitable[T]], sync: Callable[[], Awaitable[object]]
    ) -> T:
        """One whole turn: `step`, then `sync`."""
        try:
            return await self.step(step)
        finally:
            await self.sync(sync)
