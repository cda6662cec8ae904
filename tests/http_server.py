"""A threaded HTTP server on a free local port, for the test servers that script a reward
model or an LLM judge."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    # The default listen backlog (5) drops connects from 20 concurrent episodes: the client
    # then retries after a 1 s SYN timeout, which reads as a slow server.
    request_queue_size = 128


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], script: object) -> Iterator[int]:
    """Serve `handler` (which reads `self.server.script`) until the block ends; yields the
    port."""
    server = _Server(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.script = script  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
