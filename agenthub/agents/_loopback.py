"""`Loopback`: an ASGI app on a loopback TCP port while episodes use it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

__all__ = ["Loopback"]


class Loopback:
    """Serves `app` over real HTTP on 127.0.0.1 (a free port) for agent programs run as
    subprocesses. Started by the first episode that needs it (`origin()`), shared by those
    running at once, and shut down when the last of them ends, so no server outlives the
    episodes that use it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._users = 0
        self._lock = anyio.Lock()
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._origin = ""

    @asynccontextmanager
    async def origin(self) -> AsyncIterator[str]:
        """The server's origin (`http://127.0.0.1:PORT`) while in the block."""
        async with self._lock:
            if self._users == 0:
                await self._start()
            self._users += 1
        try:
            yield self._origin
        finally:
            with anyio.CancelScope(shield=True):
                async with self._lock:
                    self._users -= 1
                    if self._users == 0:
                        await self._stop()

    async def _start(self) -> None:
        import uvicorn

        config = uvicorn.Config(self.app, host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        # A task of the loop, not of one episode's task group: episodes start and stop it
        # from their own tasks.
        task = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:
            if task.done():
                await task
                raise RuntimeError(
                    "the loopback endpoint for agent commands could not start listening on "
                    "127.0.0.1; check that the machine allows local TCP servers"
                )
            await anyio.sleep(0.005)
        self._server, self._task = server, task
        self._origin = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"

    async def _stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task
        self._server = self._task = None
