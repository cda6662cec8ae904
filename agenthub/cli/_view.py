"""`agenthub view`: look at runs in the browser."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="run directories of `agenthub eval` or `agenthub train`, or files saved by the "
        "REPL's :save",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 lets "
        "other machines read these runs)",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument(
        "--tokenizer",
        default=None,
        metavar="DIR",
        help="model directory whose tokenizer decodes the tokens (default: the run's model)",
    )
    parser.add_argument(
        "--no-browser", action="store_true", help="only print the address; open no browser"
    )


def view_command(args: argparse.Namespace) -> int:
    from agenthub.view import check_run_paths, plotly_js, serve

    plotly_js()  # the missing extra is said before anything else
    runs = check_run_paths(args.runs)
    serve(
        runs,
        host=args.host,
        port=args.port,
        tokenizer=Path(args.tokenizer) if args.tokenizer else None,
        open_browser=not args.no_browser,
    )
    return 0
