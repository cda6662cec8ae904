"""The ASGI app: OpenEnv's routes over a `SessionPool`.

`/ws` is OpenEnv's WebSocket session (`_websocket.py`). The HTTP routes keep a
session too, unlike OpenEnv's stateless ones (an agenthub env's step needs the episode its
reset began): `POST /reset` answers with `metadata.session_id`, which `/step`, `/state` and
`/close` take."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from agenthub import __version__
from agenthub._registry import load_entry_point, spec
from agenthub.integrations.openenv_server._errors import ServeError
from agenthub.integrations.openenv_server._protocol import (
    ResetParams,
    ServedAction,
    ServedObservation,
    ServedState,
)
from agenthub.integrations.openenv_server._requests import call, json_object, validated
from agenthub.integrations.openenv_server._sessions import ServeConfig, SessionPool
from agenthub.integrations.openenv_server._websocket import SessionSocket

__all__ = ["build_app"]

POLICY_VIOLATION = 1008


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
            WebSocketRoute("/ws", SessionSocket(pool)),
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
        body = json_object(await request.body(), empty_ok=True)
        session_id = body.pop("session_id", None)
        params = validated(ResetParams, body)
        if session_id is not None:
            result = await call(self.pool.get(session_id), "reset", params)
            return JSONResponse({**result, "metadata": {"session_id": session_id}})
        session = await self.pool.open("http")
        try:
            result = await call(session, "reset", params)
        except BaseException:
            await self.pool.close(session)
            raise
        return JSONResponse({**result, "metadata": {"session_id": session.id}})

    async def step(self, request: Request) -> Response:
        body = json_object(await request.body())
        session = self.pool.get(body.get("session_id"))
        if "action" not in body:
            raise ServeError(
                422, "VALIDATION_ERROR", 'no action: give {"action": {"message": ...}}'
            )
        action = validated(ServedAction, body["action"])
        return JSONResponse(await call(session, "step", action))

    async def state(self, request: Request) -> Response:
        session = self.pool.get(request.query_params.get("session_id"))
        return JSONResponse(session.state().model_dump(mode="json"))

    async def close(self, request: Request) -> Response:
        session = self.pool.get(json_object(await request.body()).get("session_id"))
        await self.pool.close(session)
        return JSONResponse({"closed": session.id})


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
