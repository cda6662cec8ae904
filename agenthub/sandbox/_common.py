"""Helpers every backend shares: checking requests and turning raw facts into an `ExecStatus`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from agenthub.sandbox._types import ExecResult, ExecStatus, Limits

MAIN = "main.py"
SANDBOX_UID = 65534
"""The unprivileged user code runs as inside a container (`nobody`)."""


def as_bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def request_files(code: str, files: Mapping[str, str | bytes] | None) -> dict[str, bytes]:
    """`main.py` plus `files`, each path checked to stay inside the work dir."""
    out = {MAIN: as_bytes(code)}
    for name, content in (files or {}).items():
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not path.parts or name == MAIN:
            raise ValueError(
                f"sandbox file name {name!r} must be a relative path inside the work dir, "
                f"without '..', and not {MAIN!r} (that is the code itself)"
            )
        out[str(path)] = as_bytes(content)
    return out


@dataclass(frozen=True, slots=True)
class RawOutcome:
    """What a backend observed about one run, before it is classified."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool
    output_limit: bool
    oom_killed: bool
    duration_s: float


def classify(raw: RawOutcome) -> ExecResult:
    if raw.timed_out:
        status = ExecStatus.TIMEOUT
    elif raw.output_limit:
        status = ExecStatus.OUTPUT_LIMIT
    elif raw.oom_killed or (raw.exit_code != 0 and _ran_out_of_memory(raw.stderr)):
        status = ExecStatus.MEMORY_LIMIT
    elif raw.exit_code is not None and raw.exit_code < 0:
        status = ExecStatus.KILLED
    elif raw.exit_code != 0:
        status = ExecStatus.RUNTIME_ERROR
    else:
        status = ExecStatus.OK
    return ExecResult(
        status=status,
        exit_code=raw.exit_code,
        stdout=decode(raw.stdout),
        stderr=decode(raw.stderr),
        truncated=raw.truncated,
        duration_s=raw.duration_s,
    )


def _ran_out_of_memory(stderr: bytes) -> bool:
    # An uncaught MemoryError ends Python's traceback; the interpreter itself failing to
    # allocate at start-up prints "Cannot allocate memory" or "failed to allocate".
    tail = stderr[-2000:]
    return any(
        marker in tail
        for marker in (b"MemoryError", b"Cannot allocate memory", b"failed to allocate")
    )


def sandbox_error(detail: str, duration_s: float = 0.0) -> ExecResult:
    return ExecResult(status=ExecStatus.SANDBOX_ERROR, detail=detail, duration_s=duration_s)


def engine_lost(detail: str, duration_s: float = 0.0) -> ExecResult:
    return ExecResult(status=ExecStatus.ENGINE_LOST, detail=detail, duration_s=duration_s)


def needs_recycle(result: ExecResult) -> bool:
    """A run that hit a limit leaves its container suspect: replace it."""
    return result.status not in (ExecStatus.OK, ExecStatus.RUNTIME_ERROR)


def effective(limits: Limits | None, default: Limits) -> Limits:
    return default if limits is None else limits
