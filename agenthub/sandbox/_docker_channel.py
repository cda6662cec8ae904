"""The host's end of a pool container: the socket attached to its supervisor, and requests."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.to_thread

from agenthub.sandbox._common import (
    RawOutcome,
    classify,
    needs_recycle,
    request_files,
    sandbox_error,
)
from agenthub.sandbox._types import ExecResult, Limits

__all__ = ["Channel", "encode_request", "execute"]


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


async def execute(channel: Channel, payload: bytes, bound_s: float) -> tuple[ExecResult, bool]:
    """Run one request in `channel`'s container, waiting for its supervisor at most `bound_s`;
    the result, and whether the container must be replaced rather than reused (it hit a
    limit, left processes or files behind, or its supervisor failed)."""
    import docker

    try:
        with anyio.fail_after(bound_s):
            out = await anyio.to_thread.run_sync(
                channel.call, payload, bound_s, abandon_on_cancel=True
            )
    except TimeoutError:
        return sandbox_error("the container's supervisor did not answer in time"), True
    except (docker.errors.DockerException, OSError, EOFError) as exc:
        return sandbox_error(f"lost the container's supervisor: {exc}"), True
    try:
        report = json.loads(out)
    except ValueError:
        return sandbox_error(f"the supervisor answered garbage: {out[:200]!r}"), True
    if "error" in report:
        return sandbox_error(report["error"]), True
    result = classify(
        RawOutcome(
            exit_code=report["exit_code"],
            stdout=base64.b64decode(report["stdout"]),
            stderr=base64.b64decode(report["stderr"]),
            truncated=report["truncated"],
            timed_out=report["timed_out"],
            output_limit=report["output_limit"],
            oom_killed=report["oom_killed"],
            duration_s=report["duration_s"],
        )
    )
    return result, needs_recycle(result) or report["leftover"] or report["disk_full"]
