"""`/ws`: OpenEnv's WebSocket session, one env per connection. Frames `reset`, `step`,
`state` and `close` are answered by `observation`, `state` or `error`.

It speaks ASGI's own messages rather than through Starlette's `WebSocket`: every frame of
every session passes here, and the wrapper's state checks on each receive and send cost
about a tenth of the server's CPU per `math` episode (measured without sockets: the app
called with ASGI messages in one process)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from starlette.types import Receive, Scope, Send

from agenthub.integrations.openenv_server._errors import ServeError
from agenthub.integrations.openenv_server._protocol import ResetParams, ServedAction
from agenthub.integrations.openenv_server._requests import call, json_object, validated
from agenthub.integrations.openenv_server._sessions import EnvSession, SessionPool

__all__ = ["SessionSocket"]

NORMAL, GOING_AWAY, TRY_AGAIN_LATER = 1000, 1001, 1013


class SessionSocket:
    """The ASGI app of `/ws` over `pool`."""

    def __init__(self, pool: SessionPool) -> None:
        self.pool = pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        try:
            session = await self.pool.open("ws")
        except ServeError as exc:
            await _send(send, {"type": "error", "data": exc.data()})
            await _close(send, TRY_AGAIN_LATER, "the server is full")
            return
        try:
            with session.watch:
                await _play(receive, send, session)
            if session.watch.cancel_called:  # the pool found it idle
                timeout = self.pool.config.session_timeout_s
                message = f"no message for {timeout:g} s: the session is closed"
                error = ServeError(408, "SESSION_ERROR", message)
                await _send(send, {"type": "error", "data": error.data()})
                await _close(send, GOING_AWAY)
        finally:
            await self.pool.close(session)


async def _play(receive: Receive, send: Send, session: EnvSession) -> None:
    while (frame := await receive())["type"] == "websocket.receive":
        session.touch()
        try:
            reply = await _answer(session, frame.get("text"))
        except ServeError as exc:
            reply = {"type": "error", "data": exc.data()}
        if reply is None:
            await _close(send, NORMAL)
            return
        if not await _send(send, reply):
            return


async def _answer(session: EnvSession, text: str | None) -> dict[str, Any] | None:
    """The reply to one frame; None for `close`."""
    if text is None:
        raise ServeError(400, "INVALID_JSON", "binary frame: send each message as JSON text")
    message = json_object(text, what="the message")
    kind, data = message.get("type"), message.get("data", {})
    if kind == "reset":
        reset = validated(ResetParams, data)
        return {"type": "observation", "data": await call(session, "reset", reset)}
    if kind == "step":
        action = validated(ServedAction, data)
        return {"type": "observation", "data": await call(session, "step", action)}
    if kind == "state":
        return {"type": "state", "data": session.state().model_dump(mode="json")}
    if kind == "close":
        return None
    raise ServeError(
        400, "UNKNOWN_TYPE", f"unknown message type {kind!r}: send reset, step, state or close"
    )


async def _send(send: Send, reply: dict[str, Any]) -> bool:
    """Send, or say False when the client is gone (the server says so with an `OSError`)."""
    try:
        await send({"type": "websocket.send", "text": json.dumps(reply)})
    except (RuntimeError, OSError):
        return False
    return True


async def _close(send: Send, code: int, reason: str = "") -> None:
    with contextlib.suppress(RuntimeError, OSError):  # already gone: nothing left to close
        await send({"type": "websocket.close", "code": code, "reason": reason})
