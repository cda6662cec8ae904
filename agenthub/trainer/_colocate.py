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

from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

__all__ = ["SLEEP_LEVEL", "GpuTurns", "SleepingEngine"]

SLEEP_LEVEL = 2
T = TypeVar("T")


class SleepingEngine(Protocol):
    """What a colocated engine offers (`VLLMEngine.sleep` / `wake_up`, or a rollout worker's
    actor forwarding them)."""

    async def sleep(self, level: int) -> None: ...

    async def wake_up(self, tags: list[str] | None) -> None: ...


class GpuTurns:
    """The learner's turn on a GPU shared with a rollout engine: the engine sleeps (its
    requests held where they are), the learner steps, the engine's weights wake and the new
    ones are sent into them (`sync`, a weight-transfer round), then its KV cache wakes and
    the held requests go on, on the new weights. A step that fails still ends with the
    learner's weights sent and the engine awake, so the engine never serves freed memory."""

    def __init__(self, engine: SleepingEngine, level: int = SLEEP_LEVEL) -> None:
        if level not in (1, 2):
            raise ValueError(f"vLLM sleeps at level 1 or 2, not {level}")
        self.engine = engine
        self.level = level

    async def learner_turn(
        self, step: Callable[[], Awaitable[T]], sync: Callable[[], Awaitable[object]]
    ) -> T:
        await self.engine.sleep(self.level)
        try:
            return await step()
        finally:
            await self.engine.wake_up(["weights"])
            await sync()
            await self.engine.wake_up(["kv_cache"])
