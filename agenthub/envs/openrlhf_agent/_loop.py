from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


class LoopThread:
    """An event loop on a thread of its own.

    Agent files often block inside `async def step` (a subprocess, a sync HTTP call). Running
    each agent on its own loop means such code stalls only that agent, never the episodes
    sharing the main loop. Cancelling the awaiting task cancels the coroutine on this loop.
    """

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    async def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return await asyncio.wrap_future(future)

    async def aclose(self, timeout_s: float = 5.0) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._cancel_all_and_stop)
        await anyio.to_thread.run_sync(self._thread.join, timeout_s)
        if not self._thread.is_alive():
            self._loop.close()
        # else: an agent is stuck in blocking code; the daemon thread dies with the process.

    def _cancel_all_and_stop(self) -> None:
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        self._loop.stop()
