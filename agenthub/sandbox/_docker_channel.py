"""The host's end of a pool container: the socket attached to its supervisor, and requests."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from collections.abc import Mapping
from typing import Any

from agenthub.sandbox._common import request_files
from agenthub.sandbox._types import Limits

__all__ = ["Channel", "encode_request"]


class Channel:
    """A pool container and the socket attached to its supervisor's stdin and stdout.

    Requests go in as JSON lines; the answers come back in docker's multiplexed stream
    format (an 8-byte header per frame: stream id, then the payload size)."""

    def __init__(self, container: Any, api: Any, generation: int) -> None:
        self.container = container
        self.id = container.id
        self.generation = generation
        """Which connection to the engine made it: one from before an engine loss is dead."""
        response = api.attach_socket(
            container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        self._socket: socket.socket = response._sock
        self._pending = b""

    def call(self, request: bytes, timeout_s: float) -> bytes:
        """Send one request and return the supervisor's one-line answer (blocking)."""
        self._socket.settimeout(timeout_s)
        self._socket.sendall(request)
        line = bytearray()
        while not line.endswith(b"\n"):
            stream, payload = self._frame()
            if stream == 1:
                line += payload
        return bytes(line)

    def _frame(self) -> tuple[int, bytes]:
        header = self._read(8)
        return header[0], self._read(int.from_bytes(header[4:8], "big"))

    def _read(self, n: int) -> bytes:
        while len(self._pending) < n:
            chunk = self._socket.recv(max(65536, n))
            if not chunk:
                raise EOFError("the sandbox container's supervisor exited")
            self._pending += chunk
        data, self._pending = self._pending[:n], self._pending[n:]
        return data

    def alive(self) -> bool:
        """Whether the supervisor's socket is still open and quiet; an engine that restarted
        closed the sockets of the containers it took down (without blocking)."""
        try:
            self._socket.settimeout(0)  # with a timeout, recv would first wait for data
            self._socket.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True  # nothing to read: open, and no stray output from a past run
        except OSError:
            return False
        return False  # closed (b""), or output nobody asked for

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.close()


def encode_request(
    code: str, stdin: str | bytes, files: Mapping[str, str | bytes] | None, limits: Limits
) -> bytes:
    encoded = {
        name: base64.b64encode(data).decode() for name, data in request_files(code, files).items()
    }
    stdin_bytes = stdin.encode() if isinstance(stdin, str) else stdin
    request = {
        "files": encoded,
        "stdin": base64.b64encode(stdin_bytes).decode(),
        "timeout_s": limits.timeout_s,
        "memory_mb": limits.memory_mb,
        "cap": limits.output_bytes,
    }
    return json.dumps(request).encode() + b"\n"
