"""`agenthub serve`: an env served over OpenEnv's wire protocol (HTTP and WebSocket)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from agenthub._errors import AgentHubError
from agenthub._listen import is_loopback, listen, run_app
from agenthub._pairs import parse_kwargs
from agenthub.cli._envs import add_env_arguments

if TYPE_CHECKING:
    from agenthub.integrations.openenv_server import ServeConfig

TOKEN_VARIABLE = "AGENTHUB_SERVE_TOKEN"

SERVER_OPTIONS = {"ws_per_message_deflate": False, "loop": "asyncio"}
"""uvicorn's settings for `agenthub serve`. Frames are small JSON: compressing each costs
more CPU than it saves on the wire. asyncio's own loop, not uvloop: envs run on it everywhere
else (`agenthub eval`, training, `check_env`), and its socket writes let go of the GIL, so an
env's threads (the math verifier's drivers) run while a write waits on a busy core; uvloop's
hold it, and the server spent about 10% more CPU per `math` episode on it
(benchmarks/serve_overhead.py)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_env_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (8000)")
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=64,
        metavar="N",
        help="sessions (env instances) open at a time; more are refused (64)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="a session with no request for S seconds is closed, its env with it (300)",
    )
    parser.add_argument(
        "--env-timeout",
        type=float,
        default=300.0,
        metavar="S",
        help="one reset or step of the env; past it that session gets an env_timeout (300)",
    )
    parser.add_argument(
        "--token",
        default=None,
        help=f"every request must carry 'Authorization: Bearer TOKEN' (or set {TOKEN_VARIABLE})",
    )


def serve_command(args: argparse.Namespace) -> int:
    from agenthub.cli._envs import find_local_envs

    config = _config(args)
    find_local_envs(config.env_id)
    from agenthub.integrations.openenv_server import build_app, check_buildable

    check_buildable(config)  # a wrong id or argument: one line now, not per session
    listener = listen(args.host, args.port)
    print(_banner(args, config.token is not None), file=sys.stderr, flush=True)
    run_app(build_app(config), listener, **SERVER_OPTIONS)
    return 0


def _config(args: argparse.Namespace) -> ServeConfig:
    from agenthub.integrations.openenv_server import ServeConfig

    if not 1 <= args.port <= 65535:
        raise AgentHubError(f"--port {args.port}: give a port from 1 to 65535")
    if args.max_sessions < 1:
        raise AgentHubError(f"--max-sessions {args.max_sessions}: give at least 1")
    for flag, value in (
        ("--session-timeout", args.session_timeout),
        ("--env-timeout", args.env_timeout),
    ):
        if not value > 0:
            raise AgentHubError(f"{flag} {value}: give a number of seconds above 0")
    return ServeConfig(
        env_id=args.env,
        env_kwargs=parse_kwargs(args.env_kwargs),
        max_sessions=args.max_sessions,
        session_timeout_s=args.session_timeout,
        env_timeout_s=args.env_timeout,
        token=args.token or os.environ.get(TOKEN_VARIABLE) or None,
    )


def _banner(args: argparse.Namespace, has_token: bool) -> str:
    url = f"http://{args.host}:{args.port}"
    lines = [
        f"agenthub serve: {args.env} over OpenEnv's protocol on {url} (WebSocket {url}/ws; "
        f"POST /reset, /step; GET /state, /schema, /metadata, /health); up to "
        f"{args.max_sessions} sessions; Ctrl-C stops"
    ]
    if not is_loopback(args.host):
        lines.append(
            f"agenthub serve: WARNING: listening on {args.host}: anyone who can reach this port "
            "can run the env (code_exec runs their code in its sandbox)"
            + ("" if has_token else "; give --token to require a token")
        )
    return "\n".join(lines)
