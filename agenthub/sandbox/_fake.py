"""An in-memory `Sandbox` for unit tests of code that uses the seam."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._common import as_bytes, request_files
from agenthub.sandbox._types import ExecResult, ExecStatus, Limits, SandboxError

__all__ = ["FakeSandbox", "SandboxRequest", "run_in_subprocess"]


@dataclass(frozen=True)
class SandboxRequest:
    """One `run` call as the fake saw it."""

    code: str
    stdin: bytes
    files: Mapping[str, bytes]
    limits: Limits


def run_in_subprocess(request: SandboxRequest) -> ExecResult:
    """Run trusted code as `python main.py` in a temporary directory holding the request's
    files: no isolation and no limits but the timeout. Good enough for unit tests of
    harnesses and feedback."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agenthub-fake-") as work:
        for name, data in request.files.items():
            (Path(work) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(work) / name).write_bytes(data)
        (Path(work) / "main.py").write_text(request.code, encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "main.py"],
                input=request.stdin,
                capture_output=True,
                cwd=work,
                timeout=request.limits.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return ExecResult(
                status=ExecStatus.TIMEOUT,
                stdout=(exc.stdout or b"").decode("utf-8", "replace"),
                stderr=(exc.stderr or b"").decode("utf-8", "replace"),
                duration_s=time.perf_counter() - start,
            )
    return ExecResult(
        status=ExecStatus.OK if done.returncode == 0 else ExecStatus.RUNTIME_ERROR,
        exit_code=done.returncode,
        stdout=done.stdout.decode("utf-8", "replace"),
        stderr=done.stderr.decode("utf-8", "replace"),
        duration_s=time.perf_counter() - start,
    )


class FakeSandbox(Sandbox):
    """Answers each `run` with `respond(request)` (by default `run_in_subprocess`) and records
    the requests, so tests can script sandbox failures and check what was sent. `respond` runs
    in a worker thread: like a real sandbox, the fake must not block the event loop."""

    name = "fake"

    def __init__(
        self,
        respond: Callable[[SandboxRequest], ExecResult] = run_in_subprocess,
        *,
        limits: Limits | None = None,
    ) -> None:
        self.respond = respond
        self.limits = limits or Limits()
        self.requests: list[SandboxRequest] = []
        self.closed = 0

    async def run(
        self,
        code: str,
        *,
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        if self.closed:
            raise SandboxError("this FakeSandbox is closed")
        all_files = request_files(code, files)
        del all_files["main.py"]
        request = SandboxRequest(code, as_bytes(stdin), all_files, limits or self.limits)
        self.requests.append(request)
        return await anyio.to_thread.run_sync(self.respond, request)

    async def aclose(self) -> None:
        self.closed += 1
