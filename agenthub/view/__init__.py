"""`agenthub view`: a local web app over run directories of `agenthub eval` and `agenthub
train` and files saved by the REPL's `:save`.

`create_app(paths)` is the Starlette app (a JSON API and the page that draws it); `serve`
binds it to 127.0.0.1 on a free port. Large JSONL files are read through `JsonLines`, an index
of line offsets built in the background, so a page never waits for the whole file.
"""

from agenthub.view._app import create_app, plotly_js
from agenthub.view._lines import JsonLines, Notice
from agenthub.view._runs import EpisodeRow, Run, episode_row
from agenthub.view._serve import check_run_paths, exposure_warning, serve
from agenthub.view._tokens import TokenizerLookup, TokenKind, token_kinds

__all__ = [
    "EpisodeRow",
    "JsonLines",
    "Notice",
    "Run",
    "TokenKind",
    "TokenizerLookup",
    "check_run_paths",
    "create_app",
    "episode_row",
    "exposure_warning",
    "plotly_js",
    "serve",
    "token_kinds",
]
