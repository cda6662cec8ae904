"""Choosing a backend: docker, then bwrap; never unisolated unless asked by name."""

from __future__ import annotations

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._docker import IMAGE, DockerSandbox, check_image, connect
from agenthub.sandbox._process import BwrapSandbox, UnisolatedSandbox, bwrap_problem
from agenthub.sandbox._types import Limits, SandboxUnavailableError

__all__ = ["BACKENDS", "open_sandbox", "resolve_backend"]

BACKENDS = ("auto", "docker", "bwrap", "unisolated")


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
    what to install when it cannot work here."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {BACKENDS}")
    if backend == "unisolated":
        return backend
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
    if name == "docker":
        return DockerSandbox(image=image or IMAGE, pool_size=pool_size, limits=limits)
    if name == "bwrap":
        return BwrapSandbox(limits=limits, concurrency=pool_size)
    return UnisolatedSandbox(limits=limits, concurrency=pool_size)
