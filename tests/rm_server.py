"""A real OpenRLHF-protocol reward server on loopback, with scripted misbehaviour."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from tests.http_server import serving


@dataclass
class Script:
    fail_first: int = 0  # answer HTTP 500 to this many requests first
    hang_s: float = 0.0  # sleep this long before answering
    status: int = 200  # status of the (non-failing) answer
    body: str | None = None  # raw answer instead of computed rewards
    together: int = 0  # hold each request until this many are in flight at once (10 s at most)
    requests: list[dict[str, list[object]]] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)  # the status of each answer sent
    _barrier: threading.Barrier | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.together:
            self._barrier = threading.Barrier(self.together, timeout=10)

    @property
    def answered(self) -> int:
        return len(self.answers)

    def wait_for_the_others(self) -> bool:
        """With `together`, wait until that many requests are in flight; False if they never
        were (the client sent them one after another)."""
        if self._barrier is None:
            return True
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            return False
        return True


class _Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        script = self.server.script  # type: ignore[attr-defined]
        script.requests.append(body)
        if len(script.requests) <= script.fail_first:
            return self._answer(500, '{"error": "warming up"}')
        if not script.wait_for_the_others():
            return self._answer(500, '{"error": "the requests did not come together"}')
        if script.hang_s:
            time.sleep(script.hang_s)
        if script.body is not None:
            return self._answer(script.status, script.body)
        rewards = [
            float(len(q) - len(p)) for q, p in zip(body["query"], body["prompts"], strict=True)
        ]
        answer = {
            "rewards": rewards,
            "scores": [r / 10 for r in rewards],
            "extra_logs": {"port": [float(self.server.server_port)] * len(rewards)},
        }
        self._answer(script.status, json.dumps(answer))

    def _answer(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.server.script.answers.append(status)  # type: ignore[attr-defined]
        # the client may have given up waiting, which is what some tests provoke
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


@contextmanager
def reward_server(script: Script | None = None) -> Iterator[tuple[str, Script]]:
    script = script or Script()
    with serving(_Handler, script) as port:
        yield f"http://127.0.0.1:{port}/get_reward", script
