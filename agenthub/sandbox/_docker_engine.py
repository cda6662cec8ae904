"""The Docker engine as the pool sees it: connecting, bounded calls, container options, and
removing containers (ours, and those of crashed processes)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from agenthub.sandbox._common import SANDBOX_UID
from agenthub.sandbox._types import Limits, SandboxEngineError, SandboxUnavailableError

IMAGE_LABEL = "agenthub.sandbox.image"
CONTAINER_LABEL = "agenthub.sandbox"
OWNER_LABEL = "agenthub.sandbox.owner"
BOX = "/box"
T = TypeVar("T")


def _process_start(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def owner() -> str:
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
            force_remove(container)
            removed += 1
    return removed


def force_remove(container: Any) -> None:
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
    """A docker client that answers, or `SandboxEngineError` saying why not."""
    import docker

    try:
        client = docker.from_env(timeout=max(1, int(timeout_s)), max_pool_size=32)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise SandboxEngineError(
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


def container_options(image: str, command: list[str], limits: Limits, owner: str) -> dict[str, Any]:
    """`containers.create`'s arguments for a locked-down pool container of `owner`."""
    # Not detached, so the engine closes the supervisor's stdin when our attached socket
    # closes (StdinOnce), even when this process is killed: the supervisor then exits and
    # the engine removes the container (auto_remove) instead of leaving it to run.
    return dict(
        image=image,
        command=command,
        detach=False,
        stdin_open=True,
        auto_remove=True,
        labels={CONTAINER_LABEL: "1", OWNER_LABEL: owner},
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


def remove_by_id(client: Any, container_id: str) -> None:
    import docker

    try:
        container = client.containers.get(container_id)
    except docker.errors.NotFound:
        return
    force_remove(container)


async def bounded(call: Callable[[], T], limit_s: float, what: str) -> T:
    """`call()` in a thread, given up (not waited for) after `limit_s`."""
    try:
        with anyio.fail_after(limit_s):
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    except TimeoutError as exc:
        raise SandboxEngineError(
            f"the Docker engine did not {what} within {limit_s:.2g} s (hung or restarting)"
        ) from exc
