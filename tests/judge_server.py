"""A small OpenAI-compatible chat server on loopback that grades like a judge, with scripted
misbehaviour. The grade: 9 when the graded response contains "good", else 2."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.http_server import serving


@dataclass
class JudgeScript:
    fail_first: int = 0  # answer HTTP 500 to this many requests first
    hang_s: float = 0.0  # sleep this long before answering
    status: int = 200
    body: str | None = None  # raw HTTP body instead of a chat completion
    content: str | None = None  # the judge's message text instead of the computed grade
    requests: list[dict[str, Any]] = field(default_factory=list)
    active: int = 0
    max_active: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def grade(prompt: str) -> str:
    response = prompt.split("[Response]", 1)[-1].split("Grade the response", 1)[0]
    score = 9 if "good" in response else 2
    return f'Looks {"fine" if score > 5 else "poor"}.\n{{"score": {score}, "reason": "r{score}"}}'


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        script: JudgeScript = self.server.script  # type: ignore[attr-defined]
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with script.lock:
            script.requests.append(body)
            n = len(script.requests)
            script.active += 1
            script.max_active = max(script.max_active, script.active)
        try:
            if self.path != "/v1/chat/completions":
                return self._answer(404, '{"error": "not found"}')
            if n <= script.fail_first:
                return self._answer(500, '{"error": "warming up"}')
            time.sleep(script.hang_s or 0.01)
            if script.body is not None:
                return self._answer(script.status, script.body)
            content = script.content or grade(body["messages"][-1]["content"])
            answer = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
            }
            self._answer(script.status, json.dumps(answer))
        finally:
            with script.lock:
                script.active -= 1

    def _answer(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)


@contextmanager
def judge_server(script: JudgeScript | None = None) -> Iterator[tuple[str, JudgeScript]]:
    """Yields the base URL (`http://127.0.0.1:PORT/v1`) and the script."""
    script = script or JudgeScript()
    with serving(_Handler, script) as port:
        yield f"http://127.0.0.1:{port}/v1", script
