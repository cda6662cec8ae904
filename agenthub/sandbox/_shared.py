"""One warm sandbox per event loop, shared by every environment instance that asks for it."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
from anyio.lowlevel import RunVar

from agenthub.sandbox._auto import forget_backend, open_backend, resolve_backend
from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._types import ExecResult, ExecStatus, Limits, SandboxError

__all__ = ["SharedSandbox"]

_Key = tuple[str, Limits, "int | None", str | None]


@dataclass
class _Entry:
    sandbox: Sandbox
    users: int = 0


_shared: RunVar[dict[_Key, _Entry]] = RunVar("agenthub_shared_sandboxes")
# Backends named by handles (not `auto`, which `resolve_backend` remembers) that worked.
_named: dict[tuple[str, str | None], str] = {}
_named_lock = threading.Lock()


def _resolve(backend: str, image: str | None) -> str:
    if backend == "auto":
        return resolve_backend(backend, image=image)
    with _named_lock:
        if (backend, image) not in _named:
            _named[backend, image] = resolve_backend(backend, image=image)
        return _named[backend, image]


class SharedSandbox(Sandbox):
    """A handle on a sandbox shared by all handles with the same settings in this event loop.

    Environments run one instance per concurrent episode; each holds a handle, and all of them
    draw from one warm pool sized for the machine (`pool_size`, by default one container per
    core) instead of one pool each. The backend is resolved when the handle is made, so a
    machine without any sandbox fails loudly at construction; each backend is resolved once
    per process (handles are made per episode, and a probe of a hung engine blocks for its
    timeout), `auto` again after a run of its choice failed with `sandbox_error`. A run that
    returns `engine_lost` (the Docker engine restarted or hung) changes no choice: the pool
    reconnects to the engine by itself, and a run made while it is gone returns
    `engine_lost` too instead of a handle failing to be made. The shared sandbox starts on
    the first `run` and closes when the last handle using it is closed.
    """

    def __init__(
        self,
        backend: str = "auto",
        *,
        limits: Limits | None = None,
        pool_size: int | None = None,
        image: str | None = None,
    ) -> None:
        self.name = _resolve(backend, image)
        self._auto = backend == "auto"
        self.limits = limits or Limits()
        self._key: _Key = (self.name, self.limits, pool_size, image)
        self._entry: _Entry | None = None
        self._closed = False

    async def _acquire(self) -> Sandbox:
        if self._closed:
            raise SandboxError("this sandbox handle is closed")
        if self._entry is None:
            try:
                table = _shared.get()
            except LookupError:
                table = {}
                _shared.set(table)
            entry = table.get(self._key)
            if entry is None:
                name, limits, pool_size, image = self._key
                entry = _Entry(open_backend(name, limits=limits, pool_size=pool_size, image=image))
                table[self._key] = entry
            entry.users += 1
            self._entry = entry
        return self._entry.sandbox

    async def run(
        self,
        code: str,
        *,
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        sandbox = await self._acquire()
        result = await sandbox.run(code, stdin=stdin, files=files, limits=limits or self.limits)
        if self._auto and result.status is ExecStatus.SANDBOX_ERROR:
            forget_backend(self.name, image=self._key[3])
        return result

    async def aclose(self) -> None:
        """Give the handle back; the shared sandbox closes with its last handle."""
        self._closed = True
        entry, self._entry = self._entry, None
        if entry is None:
            return
        entry.users -= 1
        if entry.users == 0:
            try:
                table = _shared.get()
            except LookupError:  # closed from another event loop than it ran in
                table = {}
            if table.get(self._key) is entry:
                del table[self._key]
            with anyio.CancelScope(shield=True):
                await entry.sandbox.aclose()
