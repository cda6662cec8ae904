"""The ASGI app: OpenEnv's routes over a `SessionPool`.

`/ws` is OpenEnv's WebSocket session (one env per connection; frames `reset`, `step`,
`state`, `close`, answered by `observation`, `state` or `error`). The HTTP routes keep a
session too, unlike OpenEnv's stateless ones (an agenthub env's step needs the episode its
reset began): `POST /reset` answers with `metadata.session_id`, which `/step`, `/state` and
`/close` take."""

from __future__ import annotations

import contextlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import parse_qs

import anyio
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from agenthub import __version__
from agenthub._registry import load_entry_point, spec
from agenthub.integrations.openenv_server._errors import ServeError
from agenthub.integrations.openenv_server._protocol import (
    ResetParams,
    ServedAction,
    ServedObservation,
    ServedState,
)
from agenthub.integrations.openenv_server._sessions import EnvSession, ServeConfig, SessionPool

__all__ = ["build_app"]

M = TypeVar("M", bound=BaseModel)
GOING_AWAY, POLICY_VIOLATION, TRY_AGAIN_LATER = 1001, 1008, 1013


def build_app(config: ServeConfig) -> Starlette:
    """The server of `config.env_id`; its `state.pool` holds the open sessions."""
    pool = SessionPool(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group() as group:
            group.start_soon(pool.reap_forever)
            try:
                yield
            finally:
                group.cancel_scope.cancel()
                await pool.aclose()

    routes = _Routes(pool)
    app = Starlette(
        routes=[
            Route("/health", routes.health, methods=["GET"]),
            Route("/metadata", routes.metadata, methods=["GET"]),
            Route("/schema", routes.schema, methods=["GET"]),
            Route("/reset", routes.reset, methods=["POST"]),
            Route("/step", routes.step, methods=["POST"]),
            Route("/state", routes.state, methods=["GET"]),
            Route("/close", routes.close, methods=["POST"]),
            WebSocketRoute("/ws", routes.websocket),
        ],
        exception_handlers={ServeError: _refused},  # type: ignore[dict-item]
        lifespan=lifespan,
    )
    app.state.pool = pool
    if config.token is not None:
        app.add_middleware(TokenCheck, token=config.token)
    return app


async def _refused(request: Request, exc: ServeError) -> Response:
    data = exc.data()
    return JSONResponse({"detail": data.pop("message"), **data}, status_code=exc.status)


class _Routes:
    def __init__(self, pool: SessionPool) -> None:
        self.pool = pool
        self.config = pool.config

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "healthy"})

    async def metadata(self, request: Request) -> Response:
        doc = (load_entry_point(spec(self.config.env_id)).__doc__ or "").strip()
        return JSONResponse(
            {
                "name": self.config.env_id,
                "description": doc.split("\n\n")[0] or f"agenthub env {self.config.env_id}",
                "version": __version__,
                "readme_content": None,
                "author": None,
                "documentation_url": None,
            }
        )

    async def schema(self, request: Request) -> Response:
        return JSONResponse(
            {
                "action": ServedAction.model_json_schema(),
                "observation": ServedObservation.model_json_schema(),
                "state": ServedState.model_json_schema(),
            }
        )

    async def reset(self, request: Request) -> Response:
        body = _object(await request.body(), empty_ok=True)
        session_id = body.pop("session_id", None)
        params = _validated(ResetParams, body)
        if session_id is not None:
            result = await _call(self.pool.get(session_id), "reset", params)
            return JSONResponse({**result, "metadata": {"session_id": session_id}})
        session = await self.pool.open("http")
        try:
            result = await _call(session, "reset", params)
        except BaseException:
            await self.pool.close(session)
            raise
        return JSONResponse({**result, "metadata": {"session_id": session.id}})

    async def step(self, request: Request) -> Response:
        body = _object(await request.body())
        session = self.pool.get(body.get("session_id"))
        if "action" not in body:
            raise ServeError(
                422, "VALIDATION_ERROR", 'no action: give {"action": {"message": ...}}'
            )
        action = _validated(ServedAction, body["action"])
        return JSONResponse(await _call(session, "step", action))

    async def state(self, request: Request) -> Response:
        session = self.pool.get(request.query_params.get("session_id"))
        return JSONResponse(session.state().model_dump(mode="json"))

    async def close(self, request: Request) -> Response:
        session = self.pool.get(_object(await request.body()).get("session_id"))
        await self.pool.close(session)
        return JSONResponse({"closed": session.id})

    async def websocket(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            session = await self.pool.open("ws")
        except ServeError as exc:
            await _send(websocket, {"type": "error", "data": exc.data()})
            await websocket.close(TRY_AGAIN_LATER, "the server is full")
            return
        try:
            with session.watch:
                await _play(websocket, session)
            if session.watch.cancel_called:  # the pool found it idle
                timeout = self.config.session_timeout_s
                message = f"no message for {timeout:g} s: the session is closed"
                error = ServeError(408, "SESSION_ERROR", message)
                await _send(websocket, {"type": "error", "data": error.data()})
                await _close(websocket, GOING_AWAY)
        finally:
            await self.pool.close(session)


async def _play(websocket: WebSocket, session: EnvSession) -> None:
    while True:
        frame = await websocket.receive()
        if frame["type"] == "websocket.disconnect":
            return
        session.touch()
        try:
            reply = await _answer(session, frame.get("text"))
        except ServeError as exc:
            reply = {"type": "error", "data": exc.data()}
        if reply is None:
            await _close(websocket, 1000)
            return
        if not await _send(websocket, reply):
            return


async def _answer(session: EnvSession, text: str | None) -> dict[str, Any] | None:
    """The reply to one frame; None for `close`."""
    if text is None:
        raise ServeError(400, "INVALID_JSON", "binary frame: send each message as JSON text")
    message = _object(text, what="the message")
    kind, data = message.get("type"), message.get("data", {})
    if kind == "reset":
        return {
            "type": "observation",
            "data": await _call(session, "reset", _validated(ResetParams, data)),
        }
    if kind == "step":
        return {
            "type": "observation",
            "data": await _call(session, "step", _validated(ServedAction, data)),
        }
    if kind == "state":
        return {"type": "state", "data": session.state().model_dump(mode="json")}
    if kind == "close":
        return None
    raise ServeError(
        400, "UNKNOWN_TYPE", f"unknown message type {kind!r}: send reset, step, state or close"
    )


async def _call(session: EnvSession, what: str, argument: Any) -> dict[str, Any]:
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


def _object(raw: bytes | str, *, empty_ok: bool = False, what: str = "the body") -> dict[str, Any]:
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


def _validated(model: type[M], data: object) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'data'}: {e['msg']}" for e in exc.errors()
        )
        raise ServeError(422, "VALIDATION_ERROR", f"{model.__name__}: {problems}") from exc


async def _send(websocket: WebSocket, reply: dict[str, Any]) -> bool:
    """Send, or say False when the client is gone."""
    try:
        await websocket.send_text(json.dumps(reply))
    except (WebSocketDisconnect, RuntimeError, OSError):
        return False
    return True


async def _close(websocket: WebSocket, code: int) -> None:
    with contextlib.suppress(RuntimeError, OSError):  # already gone: nothing left to close
        await websocket.close(code)


class TokenCheck:
    """Every request carries the token: `Authorization: Bearer TOKEN`, or `?token=TOKEN`."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        message = "a token is needed: send Authorization: Bearer TOKEN (agenthub serve --token)"
        if scope["type"] == "http":
            reply = JSONResponse({"detail": message, "code": "SESSION_ERROR"}, status_code=401)
            await reply(scope, receive, send)
        else:
            await WebSocket(scope, receive, send).close(POLICY_VIOLATION, message)

    def _allowed(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers") or [])
        given = headers.get(b"authorization", b"").removeprefix(b"Bearer ").strip()
        if not given:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            given = (query.get("token") or [""])[0].encode()
        return hmac.compare_digest(given, self._token)
