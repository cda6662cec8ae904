"""The docker backend: a warm pool of locked-down containers, one program at a time in each."""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._common import (
    engine_lost,
    sandbox_error,
)
from agenthub.sandbox._docker_channel import Channel, encode_request, execute
from agenthub.sandbox._docker_engine import (
    bounded,
    check_image,
    connect,
    container_options,
    force_remove,
    owner,
    remove_by_id,
    remove_leftovers,
)
from agenthub.sandbox._types import (
    ExecResult,
    Limits,
    SandboxEngineError,
    SandboxError,
    SandboxUnavailableError,
)

__all__ = ["IMAGE", "DockerSandbox", "default_pool_size", "remove_leftovers"]

IMAGE = "agenthub-sandbox:bookworm-py3-v1"
"""The tag `agenthub sandbox build-image` builds and the docker backend runs."""
# Beyond the program's own timeout: exec set-up, the supervisor's clean-up and the report.
GRACE_S = 15.0
# The engine's own bounds: each call of the pool's client (so that a hung engine frees the
# threads waiting on it), a run's wait to (re)connect, to get a new container, and the ping
# that tells a lost engine from a broken container. After a failed connect, runs answer
# `engine_lost` at once for RETRY_S instead of each asking a dead engine again.
API_TIMEOUT_S = 30.0
CONNECT_S = 20.0
CREATE_S = 60.0
PING_S = 5.0
RETRY_S = 1.0
_RUNNER = (Path(__file__).parent / "_docker_runner.py").read_text(encoding="utf-8")


def default_pool_size() -> int:
    """One warm container per core, at least 2 and at most 8: programs are CPU-bound and
    short, so more containers than cores only adds memory."""
    return max(2, min(8, os.cpu_count() or 2))


class DockerSandbox(Sandbox):
    """Runs each program in a warm container from a pool of `pool_size`.

    Containers have no network, a read-only root, a `limits.disk_mb` tmpfs work dir, memory,
    CPU and pids limits, no capabilities but those the supervisor needs to drop to an
    unprivileged user and to kill, and nothing from the host mounted. A supervisor inside each
    container enforces the run's timeout with a hard kill. A container whose run hit a limit,
    left processes behind or failed in any way is removed and replaced, never reused.

    The pool connects on the first `run` (or `await start()`, which also warms it), removing
    containers left by crashed processes on this host (found by label); containers are made
    as runs need them, up to `pool_size`.

    Engine loss: a run that finds the engine gone (stopped, restarting, hung past `PING_S`)
    returns `engine_lost`, and the pool drops its client and every container of that
    connection. Later runs connect again (a new client, new containers, the old ones
    removed): each waits up to `CONNECT_S` for the engine to answer, trying every `RETRY_S`,
    then returns `engine_lost`. No docker call is waited on past its bound.
    """

    name = "docker"

    def __init__(
        self, *, image: str = IMAGE, pool_size: int | None = None, limits: Limits | None = None
    ) -> None:
        self.image = image
        self.pool_size = pool_size or default_pool_size()
        self.limits = limits or Limits()
        self._client: Any = None
        self._generation = 0
        self._idle: list[Channel] = []
        self._live = _LiveContainers()
        self._slots: anyio.Semaphore | None = None
        self._start_lock: anyio.Lock | None = None
        self._retry_at = 0.0
        self._down = ""
        self._closed = False
        self._owner = owner()

    async def start(self) -> None:
        """Connect, remove leftovers of crashed runs, and warm the pool. Raises
        `SandboxEngineError` if the engine does not answer, `SandboxUnavailableError` if the
        image is missing."""
        await self._connected()
        async with anyio.create_task_group() as group:
            for _ in range(self.pool_size - len(self._idle)):
                group.start_soon(self._warm_one)

    async def _connected(self) -> None:
        """Connect if the pool has no connection, trying again every RETRY_S for CONNECT_S:
        a restart's gap costs the runs it hit, not every run that arrives during it."""
        if self._closed:
            raise SandboxError("this DockerSandbox is closed; open a new one")
        if self._start_lock is None:
            self._start_lock = anyio.Lock()
            self._slots = anyio.Semaphore(self.pool_size)
            atexit.register(self._remove_all)
        deadline = time.monotonic() + CONNECT_S
        while True:
            # A margin past the deadline: the connect attempt's own bound says why it failed.
            with anyio.move_on_after(deadline - time.monotonic() + 0.5):
                async with self._start_lock:
                    if self._client is not None:
                        return
                    if time.monotonic() >= self._retry_at:
                        await self._try_connect(max(0.1, deadline - time.monotonic()))
                        if self._client is not None:
                            return
            if time.monotonic() + RETRY_S > deadline:
                raise SandboxEngineError(self._down or "the Docker engine does not answer")
            await anyio.sleep(RETRY_S)

    async def _try_connect(self, limit_s: float) -> None:
        try:
            self._client = await bounded(self._connect, limit_s, "answer a connection")
        except SandboxEngineError as exc:
            self._retry_at, self._down = time.monotonic() + RETRY_S, str(exc)

    def _connect(self) -> Any:
        import docker

        client = connect(API_TIMEOUT_S)
        try:
            check_image(client, self.image)
            remove_leftovers(client)
            for container in self._live.made_before(self._generation):
                remove_by_id(client, container.id)  # of a lost connection, if the engine kept it
                self._live.drop(container.id)
        except (docker.errors.DockerException, OSError) as exc:
            client.close()
            raise SandboxEngineError(f"the Docker engine failed while connecting: {exc}") from exc
        except BaseException:
            client.close()
            raise
        return client

    async def _warm_one(self) -> None:
        import docker

        try:
            self._idle.append(await self._fresh())
        except (SandboxError, docker.errors.DockerException, OSError):
            return  # a run makes it when it needs it

    async def _fresh(self) -> Channel:
        """A new container, within CREATE_S; one made after its run gave up joins the pool."""
        generation = self._generation
        handed: list[Channel] = []
        abandoned = False
        lock = threading.Lock()

        def create() -> Channel:
            channel = self._create(generation)
            with lock:
                if abandoned and not self._closed:
                    self._idle.append(channel)
                handed.append(channel)
            return channel

        try:
            with anyio.fail_after(CREATE_S):
                return await anyio.to_thread.run_sync(create, abandon_on_cancel=True)
        except BaseException:
            with lock:
                abandoned = True
                if not self._closed:
                    self._idle.extend(handed)  # made just as the run gave up
            raise

    def _create(self, generation: int) -> Channel:
        limits = self.limits
        client = self._client
        if client is None or generation != self._generation:
            raise SandboxEngineError(self._down or "the Docker engine was lost")
        container = client.containers.create(
            **container_options(
                self.image, ["python3", "-I", "-S", "-c", _RUNNER], limits, self._owner
            )
        )
        self._live.add(generation, container)
        # Attached before it starts, so no moment of its life runs without an owner's socket.
        channel = Channel(container, client.api, generation)
        try:
            container.start()
        except BaseException:
            self._remove(channel)  # its socket too
            raise
        if self._closed:  # closed while this one was starting
            self._remove(channel)
        return channel

    def _remove(self, channel: Channel) -> None:
        channel.close()  # first: the supervisor exits on it even if the engine is slow
        force_remove(channel.container)
        self._live.drop(channel.id)

    async def run(
        self,
        code: str,
        *,
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        limits = limits or self.limits
        payload = encode_request(code, stdin, files, limits)
        try:
            await self._connected()
        except SandboxEngineError as exc:
            return engine_lost(str(exc))
        except SandboxUnavailableError as exc:
            return sandbox_error(str(exc))
        assert self._slots is not None
        async with self._slots:
            if self._closed:
                raise SandboxError("this DockerSandbox was closed while the run waited")
            try:
                channel = await self._checkout()
            except SandboxEngineError as exc:
                return engine_lost(str(exc))
            except SandboxError as exc:
                return sandbox_error(str(exc))
            try:
                result, recycle = await execute(channel, payload, limits.timeout_s + GRACE_S)
                if result.sandbox_failed:
                    result = await self._blame(channel, result)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._discard(channel)
                raise
            with anyio.CancelScope(shield=True):
                await self._give_back(channel, recycle)
            return result

    async def _checkout(self) -> Channel:
        """An idle container of the current connection whose supervisor still listens, else a
        new one. Raises `SandboxEngineError` when the engine is gone."""
        while self._idle:
            channel = self._idle.pop()
            if channel.generation == self._generation and channel.alive():
                return channel
            await self._discard(channel)
        import docker

        try:
            return await self._fresh()
        except (docker.errors.DockerException, OSError, TimeoutError) as exc:
            if not await self._engine_answers():
                raise SandboxEngineError(self._lose_engine(f"making a container: {exc}")) from exc
            raise SandboxError(f"could not start a sandbox container: {exc}") from exc

    async def _blame(self, channel: Channel, result: ExecResult) -> ExecResult:
        """A run the sandbox failed: the engine's loss, or this container's own failure."""
        if channel.generation != self._generation:
            return engine_lost(self._down, result.duration_s)
        if await self._engine_answers():
            return result
        return engine_lost(self._lose_engine(result.detail), result.duration_s)

    async def _engine_answers(self) -> bool:
        # On a new connection: a stopping engine still answers on the ones it has open.
        try:
            client = await bounded(lambda: connect(PING_S), PING_S, "answer a ping")
        except SandboxEngineError:
            return False
        client.close()
        return True

    def _lose_engine(self, why: str) -> str:
        """Drop the connection and its containers (their sockets close now; the next connect
        removes what the engine kept); returns what runs that meet it are told."""
        if self._client is not None:
            self._down = (
                f"the Docker engine stopped answering or restarted ({why}); the sandbox "
                "reconnects once it answers again"
            )
            self._generation += 1
            client, self._client = self._client, None
            idle, self._idle = self._idle, []
            for channel in idle:
                channel.close()
            client.close()
        return self._down

    async def _give_back(self, channel: Channel, recycle: bool) -> None:
        if channel.generation != self._generation:
            channel.close()
        elif not recycle:
            self._idle.append(channel)
        else:
            await self._discard(channel)

    async def _discard(self, channel: Channel) -> None:
        """Remove a container, within GRACE_S (a hung engine removes it when its socket's
        closing reaches it); a container of a lost connection only has its socket closed."""
        import docker

        if channel.generation != self._generation:
            channel.close()
            return
        with anyio.move_on_after(GRACE_S):
            try:
                await anyio.to_thread.run_sync(self._remove, channel, abandon_on_cancel=True)
            except (docker.errors.DockerException, OSError):
                channel.close()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for channel in self._idle:
            channel.close()  # at once: each container ends by itself even if removal times out
        self._idle.clear()
        with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE_S + API_TIMEOUT_S):
            await anyio.to_thread.run_sync(self._remove_all, abandon_on_cancel=True)
        atexit.unregister(self._remove_all)

    def _remove_all(self) -> None:
        import docker

        self._closed = True
        client = self._client
        for container in self._live.made_before(None):
            try:
                if client is None:
                    break  # the engine is lost: its containers went with it, or end alone
                remove_by_id(client, container.id)
            except (docker.errors.DockerException, OSError):
                continue  # at exit, with the engine gone: the next start removes them
            self._live.drop(container.id)
        if client is not None:
            client.close()

    def live_containers(self) -> int:
        """How many containers this sandbox has running now (for tests and monitoring)."""
        return len(self._live)


class _LiveContainers:
    """The containers a sandbox made and has not removed yet, each with the connection
    (generation) it was made on; used from the event loop, the threads that make and remove
    containers, and the exit hook."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: dict[str, tuple[int, Any]] = {}

    def add(self, generation: int, container: Any) -> None:
        with self._lock:
            self._made[container.id] = (generation, container)

    def drop(self, container_id: str) -> None:
        with self._lock:
            self._made.pop(container_id, None)

    def made_before(self, generation: int | None) -> list[Any]:
        """The containers of connections before `generation` (None: every one)."""
        with self._lock:
            return [c for gen, c in self._made.values() if generation is None or gen < generation]

    def __len__(self) -> int:
        with self._lock:
            return len(self._made)
