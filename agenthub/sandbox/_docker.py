"""The docker backend: a warm pool of locked-down containers, one program at a time in each."""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._common import (
    SANDBOX_UID,
    RawOutcome,
    classify,
    needs_recycle,
    request_files,
    sandbox_error,
)
from agenthub.sandbox._types import ExecResult, Limits, SandboxError, SandboxUnavailableError

__all__ = ["IMAGE", "DockerSandbox", "default_pool_size", "remove_leftovers"]

IMAGE = "agenthub-sandbox:bookworm-py3-v1"
"""The tag `agenthub sandbox build-image` builds and the docker backend runs."""
IMAGE_LABEL = "agenthub.sandbox.image"
CONTAINER_LABEL = "agenthub.sandbox"
OWNER_LABEL = "agenthub.sandbox.owner"
BOX = "/box"
# Beyond the program's own timeout: exec set-up, the supervisor's clean-up and the report.
GRACE_S = 15.0
_RUNNER = (Path(__file__).parent / "_docker_runner.py").read_text(encoding="utf-8")


def default_pool_size() -> int:
    """One warm container per core, at least 2 and at most 8: programs are CPU-bound and
    short, so more containers than cores only adds memory."""
    return max(2, min(8, os.cpu_count() or 2))


def _process_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _owner() -> str:
    # Host, pid and the pid's start time: a recycled pid does not look like a live owner.
    return f"{socket.gethostname()}:{os.getpid()}:{_process_start(os.getpid())}"


def _owner_is_dead(owner: str) -> bool:
    host, _, rest = owner.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's container on a shared engine: not ours to judge
    return _process_start(int(pid)) != started


def remove_leftovers(client: Any) -> int:
    """Remove sandbox containers whose owning process on this host is gone (a crashed run);
    returns how many. Containers of live processes are left alone."""
    removed = 0
    # ignore_removed: containers remove themselves (auto_remove) between listing and inspecting.
    listed = client.containers.list(
        all=True, filters={"label": CONTAINER_LABEL}, ignore_removed=True
    )
    for container in listed:
        owner = container.labels.get(OWNER_LABEL, "")
        if _owner_is_dead(owner):
            _force_remove(container)
            removed += 1
    return removed


def _force_remove(container: Any) -> None:
    """Kill and remove a container, done already if the engine's auto-removal got there first."""
    import docker

    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: its removal is already in progress
            raise
        # Wait for it (bounded), so that a removed container is gone for the caller too.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                container.reload()
            except docker.errors.NotFound:
                return
            time.sleep(0.05)


def connect(timeout_s: float = 600.0) -> Any:
    """A docker client that answers, or `SandboxUnavailableError` saying why not."""
    import docker

    try:
        client = docker.from_env(timeout=int(timeout_s), max_pool_size=32)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise SandboxUnavailableError(
            f"the Docker engine does not answer ({exc}); start it (scripts/setup.sh starts "
            "dockerd) or use the bwrap backend"
        ) from exc
    return client


def check_image(client: Any, image: str) -> None:
    import docker

    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as exc:
        raise SandboxUnavailableError(
            f"the sandbox image {image} is missing; build it with `agenthub sandbox build-image` "
            "(scripts/setup.sh does this)"
        ) from exc


class DockerSandbox(Sandbox):
    """Runs each program in a warm container from a pool of `pool_size`.

    Containers have no network, a read-only root, a `limits.disk_mb` tmpfs work dir, memory,
    CPU and pids limits, no capabilities but those the supervisor needs to drop to an
    unprivileged user and to kill, and nothing from the host mounted. A supervisor inside each
    container enforces the run's timeout with a hard kill. A container whose run hit a limit,
    left processes behind or failed in any way is removed and replaced, never reused.

    The pool starts on the first `run` (or `await start()`), which also removes containers
    left by crashed processes on this host (found by label).
    """

    name = "docker"

    def __init__(
        self, *, image: str = IMAGE, pool_size: int | None = None, limits: Limits | None = None
    ) -> None:
        self.image = image
        self.pool_size = pool_size or default_pool_size()
        self.limits = limits or Limits()
        self._client: Any = None
        self._idle: list[Any] = []
        self._live: dict[str, Any] = {}
        self._live_lock = threading.Lock()
        self._slots: anyio.Semaphore | None = None
        self._start_lock: anyio.Lock | None = None
        self._started = False
        self._closed = False
        self._owner = _owner()

    async def start(self) -> None:
        """Connect, remove leftovers of crashed runs, and warm the pool. Raises
        `SandboxUnavailableError` if the engine or the image is missing."""
        if self._closed:
            raise SandboxError("this DockerSandbox is closed; open a new one")
        if self._start_lock is None:
            self._start_lock = anyio.Lock()
        async with self._start_lock:
            if self._started:
                return
            self._client = await anyio.to_thread.run_sync(self._connect)
            self._slots = anyio.Semaphore(self.pool_size)
            atexit.register(self._remove_all)
            async with anyio.create_task_group() as group:
                for _ in range(self.pool_size):
                    group.start_soon(self._warm_one)
            self._started = True

    def _connect(self) -> Any:
        client = connect()
        check_image(client, self.image)
        remove_leftovers(client)
        return client

    async def _warm_one(self) -> None:
        self._idle.append(await anyio.to_thread.run_sync(self._create))

    def _create(self) -> Any:
        limits = self.limits
        # Not detached, so the engine closes the supervisor's stdin when our attached socket
        # closes (StdinOnce), even when this process is killed: the supervisor then exits and
        # the engine removes the container (auto_remove) instead of leaving it to run.
        container = self._client.containers.create(
            self.image,
            command=["python3", "-I", "-S", "-c", _RUNNER],
            detach=False,
            stdin_open=True,
            auto_remove=True,
            labels={CONTAINER_LABEL: "1", OWNER_LABEL: self._owner},
            network_mode="none",
            read_only=True,
            tmpfs={
                BOX: f"rw,nosuid,nodev,size={limits.disk_mb}m,"
                f"uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0700"
            },
            mem_limit=f"{limits.memory_mb + 64}m",  # + the supervisor's own share
            memswap_limit=f"{limits.memory_mb + 64}m",
            nano_cpus=int(limits.cpus * 1e9),
            pids_limit=limits.pids + 4,  # + init, the supervisor and docker's exec shim
            cap_drop=["ALL"],
            cap_add=["SETUID", "SETGID", "KILL"],
            security_opt=["no-new-privileges"],
            hostname="sandbox",
        )
        with self._live_lock:
            self._live[container.id] = container
        # Attached before it starts, so no moment of its life runs without an owner's socket.
        channel = _Channel(container, self._client.api)
        try:
            container.start()
        except BaseException:
            self._remove(channel)  # its socket too
            raise
        if self._closed:  # closed while this one was starting
            self._remove(channel)
        return channel

    def _remove(self, container: Any) -> None:
        channel = None
        if isinstance(container, _Channel):
            channel, container = container, container.container
        _force_remove(container)
        if channel is not None:
            channel.close()
        with self._live_lock:
            self._live.pop(container.id, None)

    async def run(
        self,
        code: str,
        *,
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        payload = _encode_request(code, stdin, files, limits or self.limits)
        try:
            await self.start()
        except SandboxUnavailableError as exc:
            return sandbox_error(str(exc))
        assert self._slots is not None
        async with self._slots:
            if self._closed:
                raise SandboxError("this DockerSandbox was closed while the run waited")
            container = self._idle.pop() if self._idle else await self._spare()
            if container is None:
                return sandbox_error("could not start a sandbox container")
            try:
                result, recycle = await self._exec(container, payload, limits or self.limits)
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE_S):
                    await anyio.to_thread.run_sync(self._remove, container)
                raise
            if recycle:
                with anyio.CancelScope(shield=True), anyio.move_on_after(GRACE_S):
                    await anyio.to_thread.run_sync(self._remove, container)
                    if not self._closed and (fresh := await self._spare()) is not None:
                        self._idle.append(fresh)
            else:
                self._idle.append(container)
            return result

    async def _spare(self) -> Any:
        import docker

        try:
            return await anyio.to_thread.run_sync(self._create)
        except (docker.errors.DockerException, OSError):
            return None

    async def _exec(
        self, channel: _Channel, payload: bytes, limits: Limits
    ) -> tuple[ExecResult, bool]:
        import docker

        try:
            with anyio.fail_after(limits.timeout_s + GRACE_S):
                out = await anyio.to_thread.run_sync(
                    channel.call, payload, limits.timeout_s + GRACE_S, abandon_on_cancel=True
                )
        except TimeoutError:
            return sandbox_error("the container's supervisor did not answer in time"), True
        except (docker.errors.DockerException, OSError, EOFError) as exc:
            return sandbox_error(f"lost the container's supervisor: {exc}"), True
        try:
            report = json.loads(out)
        except ValueError:
            return sandbox_error(f"the supervisor answered garbage: {out[:200]!r}"), True
        if "error" in report:
            return sandbox_error(report["error"]), True
        result = classify(
            RawOutcome(
                exit_code=report["exit_code"],
                stdout=base64.b64decode(report["stdout"]),
                stderr=base64.b64decode(report["stderr"]),
                truncated=report["truncated"],
                timed_out=report["timed_out"],
                output_limit=report["output_limit"],
                oom_killed=report["oom_killed"],
                duration_s=report["duration_s"],
            )
        )
        return result, needs_recycle(result) or report["leftover"] or report["disk_full"]

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._remove_all)
        atexit.unregister(self._remove_all)
        self._idle.clear()

    def _remove_all(self) -> None:
        import docker

        self._closed = True
        with self._live_lock:
            containers = list(self._live.values())
        for container in containers:
            try:
                self._remove(container)
            except (docker.errors.DockerException, OSError):
                continue  # at exit, with the engine gone: the next start removes them
        if self._client is not None:
            self._client.close()

    def live_containers(self) -> int:
        """How many containers this sandbox has running now (for tests and monitoring)."""
        with self._live_lock:
            return len(self._live)


class _Channel:
    """A pool container and the socket attached to its supervisor's stdin and stdout.

    Requests go in as JSON lines; the answers come back in docker's multiplexed stream
    format (an 8-byte header per frame: stream id, then the payload size)."""

    def __init__(self, container: Any, api: Any) -> None:
        self.container = container
        self.id = container.id
        response = api.attach_socket(
            container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        self._socket: socket.socket = response._sock
        self._pending = b""

    def call(self, request: bytes, timeout_s: float) -> bytes:
        """Send one request and return the supervisor's one-line answer (blocking)."""
        self._socket.settimeout(timeout_s)
        self._socket.sendall(request)
        line = bytearray()
        while not line.endswith(b"\n"):
            stream, payload = self._frame()
            if stream == 1:
                line += payload
        return bytes(line)

    def _frame(self) -> tuple[int, bytes]:
        header = self._read(8)
        return header[0], self._read(int.from_bytes(header[4:8], "big"))

    def _read(self, n: int) -> bytes:
        while len(self._pending) < n:
            chunk = self._socket.recv(max(65536, n))
            if not chunk:
                raise EOFError("the sandbox container's supervisor exited")
            self._pending += chunk
        data, self._pending = self._pending[:n], self._pending[n:]
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.close()


def _encode_request(
    code: str, stdin: str | bytes, files: Mapping[str, str | bytes] | None, limits: Limits
) -> bytes:
    encoded = {
        name: base64.b64encode(data).decode() for name, data in request_files(code, files).items()
    }
    stdin_bytes = stdin.encode() if isinstance(stdin, str) else stdin
    request = {
        "files": encoded,
        "stdin": base64.b64encode(stdin_bytes).decode(),
        "timeout_s": limits.timeout_s,
        "memory_mb": limits.memory_mb,
        "cap": limits.output_bytes,
    }
    return json.dumps(request).encode() + b"\n"
