"""Serving an ASGI app on this machine: taking the address, and running uvicorn on it.

One place for what `agenthub serve`, `agenthub serve-rm` and `agenthub view` each did: the
socket is bound first, so a port in use or a wrong host is one line before anything slow
(a model, an env) loads, then uvicorn serves the app on that socket until interrupted."""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from typing import Any

from agenthub._errors import AgentHubError

__all__ = ["is_loopback", "listen", "run_app"]


def is_loopback(host: str) -> bool:
    """Whether `host` keeps the server to this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen(host: str, port: int, *, free_port_hint: bool = False) -> socket.socket:
    """A listening socket on `host:port` (port 0: a free one); `AgentHubError` that says
    what to change when the address cannot be taken."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except OSError as exc:
        raise AgentHubError(
            f"--host {host}: {exc.strerror or exc}; give an address of this machine "
            "(127.0.0.1, or 0.0.0.0 for every interface)"
        ) from exc
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EADDRINUSE:
            advice = "pick another --port, or " + (
                "leave it out for a free one" if free_port_hint else "stop what listens there"
            )
        elif exc.errno == errno.EACCES:
            advice = "ports below 1024 need root: pick a --port above 1023"
        else:
            advice = "give an address of this machine (127.0.0.1, or 0.0.0.0 for every interface)"
        raise AgentHubError(f"cannot listen on {host}:{port}: {reason}; {advice}") from exc


def run_app(app: Any, listener: socket.socket, **options: Any) -> None:
    """Serve `app` on `listener` with uvicorn until interrupted. Quiet (warnings only, no
    access log); `options` are more of `uvicorn.Config`'s."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, **options)
    uvicorn.Server(config).run(sockets=[listener])
