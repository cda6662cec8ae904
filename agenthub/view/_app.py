"""The web app: a JSON API over the runs it was given, and the page that draws them.

Runs are named by their number in the list given at start, never by a path: no request can
name a file, so nothing outside those runs can be read. Static files come from this package
and the charting library from its installed package (the `view` extra), so the app works
offline."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agenthub._errors import AgentHubError
from agenthub.view._episodes import (
    EpisodeQuery,
    QueryError,
    curves,
    episode_detail,
    episode_page,
    tasks,
)
from agenthub.view._runs import Run
from agenthub.view._tokens import TokenizerLookup

__all__ = ["create_app", "plotly_js"]

STATIC = Path(__file__).parent / "static"
_NO_STORE = {"Cache-Control": "no-store"}


def plotly_js() -> Path:
    """plotly.js as the `plotly` package ships it; `AgentHubError` naming the extra without it."""
    spec = importlib.util.find_spec("plotly")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    raise AgentHubError(
        "agenthub view needs the plotly package for its charts: pip install 'agenthub[view]'"
    )


def create_app(
    paths: Sequence[Path],
    *,
    tokenizer: Path | None = None,
    allowed_hosts: Sequence[str] = ("127.0.0.1", "localhost"),
) -> Starlette:
    """The app over `paths` (run directories, or JSONL files saved by the REPL)."""
    runs = [Run(i, Path(p)) for i, p in enumerate(paths)]
    tokenizers = TokenizerLookup(tokenizer)
    # Reading a tokenizer and its chat template takes a moment: begun now, it is done when an
    # episode is opened.
    threading.Thread(
        target=lambda: [tokenizers.find(r.directory, r.config()[0].get("model")) for r in runs],
        name="agenthub-view-tokenizers",
        daemon=True,
    ).start()
    return Starlette(
        routes=_Api(runs, tokenizers).routes(),
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))],
        exception_handlers={
            _NotFound: _not_found,
            IndexError: _not_found,
            QueryError: _bad_query,
        },
    )


class _Api:
    """The app's routes over its runs: the page, and the JSON each of its views reads."""

    def __init__(self, runs: list[Run], tokenizers: TokenizerLookup) -> None:
        self.runs, self.tokenizers = runs, tokenizers
        self.chart = plotly_js()

    def routes(self) -> list[Route | Mount]:
        return [
            Route("/", self.index),
            Route("/vendor/plotly.min.js", self.plotly),
            Route("/api/runs", self.list_runs),
            Route("/api/runs/{run:int}", self.one_run),
            Route("/api/runs/{run:int}/episodes", self.episodes),
            Route("/api/runs/{run:int}/episodes/{index:int}", self.episode),
            Route("/api/runs/{run:int}/curves", self.curves),
            Route("/api/runs/{run:int}/tasks", self.tasks),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]

    def run_of(self, request: Request) -> Run:
        run_id: int = request.path_params["run"]
        if not 0 <= run_id < len(self.runs):
            raise _NotFound(f"no run {run_id}: this view has runs 0 to {len(self.runs) - 1}")
        return self.runs[run_id]

    def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_NO_STORE)

    def plotly(self, request: Request) -> Response:
        return FileResponse(self.chart, media_type="text/javascript")

    def list_runs(self, request: Request) -> Response:
        return _json([run.overview() for run in self.runs])

    def one_run(self, request: Request) -> Response:
        return _json(self.run_of(request).overview())

    def episodes(self, request: Request) -> Response:
        query = EpisodeQuery.parse(request.query_params)
        return _json(episode_page(self.run_of(request), query))

    def episode(self, request: Request) -> Response:
        index = request.path_params["index"]
        return _json(episode_detail(self.run_of(request), index, self.tokenizers))

    def curves(self, request: Request) -> Response:
        return _json(curves(self.run_of(request)))

    def tasks(self, request: Request) -> Response:
        return _json(tasks(self.run_of(request)))


class _NotFound(LookupError):
    pass


def _json(value: Any) -> Response:
    return JSONResponse(value, headers=_NO_STORE)


async def _not_found(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=404)


async def _bad_query(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=400)
