"""Serving the app: checking what was given, binding the port, saying where it is."""

from __future__ import annotations

import webbrowser
from collections.abc import Callable, Sequence
from pathlib import Path

from agenthub._errors import AgentHubError
from agenthub._listen import is_loopback, listen, run_app
from agenthub.view._app import create_app

__all__ = ["check_run_paths", "exposure_warning", "serve"]


def check_run_paths(paths: Sequence[str]) -> list[Path]:
    """The runs as absolute paths; `AgentHubError` for one that is not there."""
    found = []
    for given in paths:
        path = Path(given).expanduser().resolve()
        if not path.exists():
            raise AgentHubError(
                f"{given}: no such run directory or file; give directories written by "
                "`agenthub eval --out` or `agenthub train --out`, or a file saved by the REPL's "
                ":save"
            )
        found.append(path)
    return found


def exposure_warning(host: str, port: int) -> str | None:
    """What to tell the person when `host` lets other machines in."""
    if is_loopback(host):
        return None
    return (
        f"agenthub view: listening on {host}:{port}, so anyone who can reach this machine on "
        "that port can read these runs (there is no password); leave --host out to keep it to "
        "this machine (127.0.0.1)"
    )


def serve(
    paths: Sequence[Path],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    tokenizer: Path | None = None,
    open_browser: bool = True,
    say: Callable[[str], None] | None = None,
) -> None:
    """Serve the view until interrupted; port 0 takes a free one."""
    say = say or _say

    hosts = ["*"] if not is_loopback(host) else ["127.0.0.1", "localhost", "[::1]", host]
    app = create_app(paths, tokenizer=tokenizer, allowed_hosts=hosts)
    sock = listen(host, port, free_port_hint=True)
    bound = sock.getsockname()[1]
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{bound}/"
    if warning := exposure_warning(host, bound):
        say(warning)
    say(f"agenthub view: {len(paths)} run(s) at {url} (Ctrl-C stops it)")
    if open_browser:
        _open(url)
    run_app(app, sock)


def _say(text: str) -> None:
    print(text, flush=True)  # at once, also to a pipe: a script waits for the address


def _open(url: str) -> None:
    """Open the page where a browser is there to open it; a server machine has none."""
    try:
        webbrowser.get()
    except webbrowser.Error:
        return
    webbrowser.open(url)
