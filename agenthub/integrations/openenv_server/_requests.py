"""What the HTTP routes and the WebSocket session share: reading a request's JSON and
running one reset or step of a session's env."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from agenthub.integrations.openenv_server._errors import ServeError
from agenthub.integrations.openenv_server._sessions import EnvSession

__all__ = ["call", "json_object", "validated"]

M = TypeVar("M", bound=BaseModel)


async def call(session: EnvSession, what: str, argument: Any) -> dict[str, Any]:
    if session.busy:
        raise ServeError(
            409, "SESSION_ERROR", f"{what} while this session's last request is still running"
        )
    session.busy = True
    session.touch()
    try:
        if what == "reset":
            return await session.reset(argument)
        return await session.step(argument)
    finally:
        session.busy = False
        session.touch()


def json_object(
    raw: bytes | str, *, empty_ok: bool = False, what: str = "the body"
) -> dict[str, Any]:
    if empty_ok and not raw.strip():
        return {}
    try:
        found = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ServeError(400, "INVALID_JSON", f"{what} is not JSON: {exc}") from exc
    if not isinstance(found, dict):
        raise ServeError(
            400, "VALIDATION_ERROR", f"{what} must be a JSON object, not {type(found).__name__}"
        )
    return found


def validated(model: type[M], data: object) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}" for e in exc.errors()
        )
        raise ServeError(422, "VALIDATION_ERROR", f"{model.__name__}: {problems}") from exc
