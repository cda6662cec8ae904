"""Choosing a backend: docker, then bwrap; never unisolated unless asked by name."""

from __future__ import annotations

import threading

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._docker import IMAGE, DockerSandbox
from agenthub.sandbox._docker_engine import check_image, connect
from agenthub.sandbox._process import BwrapSandbox, UnisolatedSandbox, bwrap_problem
from agenthub.sandbox._types import Limits, SandboxUnavailableError

__all__ = ["BACKENDS", "open_sandbox", "resolve_backend"]

BACKENDS = ("auto", "docker", "bwrap", "unisolated")

# What `auto` chose, per image. Probing an engine that accepts and never answers takes the
# probe's whole timeout, and every environment instance resolves its backend when made.
_chosen: dict[str | None, str] = {}
_chosen_lock = threading.Lock()


def docker_problem(image: str | None = None) -> str | None:
    """Why the docker backend cannot run here, or None if it can."""
    try:
        client = connect(timeout_s=10)
        try:
            check_image(client, image or IMAGE)
        finally:
            client.close()
    except SandboxUnavailableError as exc:
        return str(exc)
    return None


def resolve_backend(backend: str = "auto", *, image: str | None = None) -> str:
    """The backend `open_sandbox(backend)` would use; raises `SandboxUnavailableError` saying
    what to install when it cannot work here. `auto` is decided once per process (and image)
    until `forget_backend` says the choice broke."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {BACKENDS}")
    if backend == "unisolated":
        return backend
    if backend == "auto":
        with _chosen_lock:
            if image not in _chosen:
                _chosen[image] = _first_working(backend, image)
            return _chosen[image]
    return _first_working(backend, image)


def forget_backend(failed: str, *, image: str | None = None) -> None:
    """The backend `auto` chose, `failed`, broke: choose again at the next `resolve_backend`.
    A no-op when `auto` has since chosen another."""
    with _chosen_lock:
        if _chosen.get(image) == failed:
            del _chosen[image]


def _first_working(backend: str, image: str | None) -> str:
    problems: dict[str, str] = {}
    if backend in ("auto", "docker"):
        problem = docker_problem(image)
        if problem is None:
            return "docker"
        problems["docker"] = problem
    if backend in ("auto", "bwrap"):
        problem = bwrap_problem()
        if problem is None:
            return "bwrap"
        problems["bwrap"] = problem
    reasons = "; ".join(f"{name}: {why}" for name, why in problems.items())
    raise SandboxUnavailableError(
        f"no isolating sandbox works here ({reasons}). Run scripts/setup.sh, or pass "
        "backend='unisolated' to run untrusted code WITHOUT isolation."
    )


def open_sandbox(
    backend: str = "auto",
    *,
    limits: Limits | None = None,
    pool_size: int | None = None,
    image: str | None = None,
) -> Sandbox:
    """A new sandbox. `auto` picks docker (engine up and image built), then bwrap; it never
    runs code unisolated: that backend must be named. `pool_size` is the docker pool's size
    or the number of concurrent bwrap processes (default: one per core, 2 to 8)."""
    name = resolve_backend(backend, image=image)
    return open_backend(name, limits=limits, pool_size=pool_size, image=image)


def open_backend(
    name: str,
    *,
    limits: Limits | None = None,
    pool_size: int | None = None,
    image: str | None = None,
) -> Sandbox:
    """A new sandbox of a backend `resolve_backend` already chose, without probing it again: a
    docker engine that is restarting now gives runs that return `engine_lost`, not an error."""
    if name == "docker":
        return DockerSandbox(image=image or IMAGE, pool_size=pool_size, limits=limits)
    if name == "bwrap":
        return BwrapSandbox(limits=limits, concurrency=pool_size)
    if name == "unisolated":
        return UnisolatedSandbox(limits=limits, concurrency=pool_size)
    raise ValueError(f"unknown sandbox backend {name!r}; choose one of {BACKENDS[1:]}")
