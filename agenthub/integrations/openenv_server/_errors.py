"""The one error a served session answers with, and closing an env whatever it does."""

from __future__ import annotations

import logging
from typing import Any, Literal

import anyio

from agenthub._env import Env
from agenthub._tracebacks import described
from agenthub.integrations.openenv_server._protocol import ErrorCode

__all__ = ["Cause", "ServeError", "aclose_logged"]

log = logging.getLogger(__name__)

Cause = Literal["env_error", "env_timeout"]


class ServeError(Exception):
    """A request the server refuses or an env failure, said to that client alone: an HTTP
    status and OpenEnv's error code, and for an env's own failure its cause as episodes
    record it (`env_error`, `env_timeout`)."""

    def __init__(
        self, status: int, code: ErrorCode, message: str, cause: Cause | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.cause = cause

    def data(self) -> dict[str, Any]:
        found: dict[str, Any] = {"message": self.message, "code": self.code}
        if self.cause is not None:
            found["cause"] = self.cause
        return found


async def aclose_logged(env: Env[Any], timeout_s: float | None) -> None:
    """Close `env`, even in a cancelled scope: an `aclose` that raises is logged, one that
    hangs is given up on after `timeout_s` (or 30 s)."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(timeout_s or 30):
        try:
            await env.aclose()
        except Exception as exc:
            log.warning("closing %s raised %s", env, described(exc))
