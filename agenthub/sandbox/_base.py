"""The `Sandbox` contract: run untrusted code with limits, get an `ExecResult` back."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from types import TracebackType

from agenthub.sandbox._types import ExecResult, Limits

__all__ = ["Sandbox"]


class Sandbox(abc.ABC):
    """Runs untrusted Python programs in isolation.

    `run(code)` writes `code` to `main.py` in a fresh, empty work dir (plus any `files`), runs
    `python3 main.py` there with `stdin` as its standard input, and returns an `ExecResult`.

    Promises every backend keeps:

    - `run` never raises because of what the code does, nor because the sandbox broke: a hostile
      or broken program, an unreachable engine, a dead container all come back as a status
      (`timeout`, `memory_limit`, `output_limit`, `killed`, `sandbox_error`, ...). It raises
      `SandboxError` only when used after `aclose`.
    - The sandbox's own failures say nothing about the code (`ExecResult.sandbox_failed`):
      `sandbox_error` for a broken part (a container gone, a supervisor that failed), and
      `engine_lost` when the engine behind the backend (the Docker daemon) stopped answering
      or restarted. After `engine_lost` the backend reconnects by itself: later runs succeed
      on a new connection once the engine answers, with no new sandbox needed.
    - Every run ends within `limits.timeout_s` plus a small margin, also on a dead or hung
      engine (each call to it is bounded), and leaves nothing running: no process, no
      container beyond the backend's warm pool.
    - `run` is cancellation-safe: cancelling it kills what it started before the cancellation
      propagates (in a shielded scope with its own timeout).
    - `run` may be called concurrently; a backend bounds how many programs run at once and
      queues the rest.
    - Runs do not see each other: the work dir is empty at the start of each run.
    - `aclose` stops and removes everything the sandbox started. It is idempotent. A sandbox is
      also an async context manager that closes on exit.
    """

    name: str = "sandbox"
    """The backend's name, as `open_sandbox` takes it."""

    @abc.abstractmethod
    async def run(
        self,
        code: str,
        *,
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        """Run `code` as `main.py` and return how it went.

        `files` maps relative paths (no `..`, no absolute paths) to contents written next to
        `main.py`. `limits` defaults to the sandbox's own limits.
        """

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Stop everything this sandbox started. Idempotent."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
