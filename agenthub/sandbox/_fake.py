"""An in-memory `Sandbox` for unit tests of code that uses the seam."""

from __future__ import annotations

import contextlib
import io
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._common import as_bytes, request_files
from agenthub.sandbox._types import ExecResult, ExecStatus, Limits, SandboxError

__all__ = ["FakeSandbox", "SandboxRequest", "run_in_process"]


@dataclass(frozen=True)
class SandboxRequest:
    """One `run` call as the fake saw it."""

    code: str
    stdin: bytes
    files: Mapping[str, bytes]
    limits: Limits


def run_in_process(request: SandboxRequest) -> ExecResult:
    """Execute trusted code in this process with redirected standard streams: no isolation,
    no limits, no subprocesses. Good enough for unit tests of harnesses and feedback."""
    out, err = io.StringIO(), io.StringIO()
    stdin = io.TextIOWrapper(io.BytesIO(request.stdin), encoding="utf-8")
    start = time.perf_counter()
    saved_stdin, sys.stdin = sys.stdin, stdin
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                exec(compile(request.code, "/box/main.py", "exec"), {"__name__": "__main__"})
                exit_code = 0
            except SystemExit as stop:
                exit_code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
            except Exception:
                traceback.print_exc()
                exit_code = 1
    finally:
        sys.stdin = saved_stdin
    return ExecResult(
        status=ExecStatus.OK if exit_code == 0 else ExecStatus.RUNTIME_ERROR,
        exit_code=exit_code,
        stdout=out.getvalue(),
        stderr=err.getvalue(),
        duration_s=time.perf_counter() - start,
    )


class FakeSandbox(Sandbox):
    """Answers each `run` with `respond(request)` (by default `run_in_process`) and records
    the requests, so tests can script sandbox failures and check what was sent."""

    name = "fake"

    def __init__(
        self,
        respond: Callable[[SandboxRequest], ExecResult] = run_in_process,
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
        return self.respond(request)

    async def aclose(self) -> None:
        self.closed += 1
