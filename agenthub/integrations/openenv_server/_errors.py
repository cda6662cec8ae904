"""The one error a served session answers with."""

from __future__ import annotations

from typing import Any, Literal

from agenthub.integrations.openenv_server._protocol import ErrorCode

__all__ = ["Cause", "ServeError"]

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
