"""What goes into a sandbox run and what comes out of it."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from agenthub._errors import AgentHubError

__all__ = [
    "ExecResult",
    "ExecStatus",
    "Limits",
    "SandboxEngineError",
    "SandboxError",
    "SandboxUnavailableError",
]

MiB = 1024 * 1024


class ExecStatus(str, enum.Enum):
    """How a run ended. Everything but `ok` and `runtime_error` means a limit was hit or the
    sandbox failed; a docker container that saw one of those is replaced, never reused."""

    OK = "ok"
    """The program exited with status 0."""
    RUNTIME_ERROR = "runtime_error"
    """The program exited with a non-zero status (an uncaught exception, `sys.exit(1)`)."""
    TIMEOUT = "timeout"
    """The program ran past `Limits.timeout_s` and was killed."""
    MEMORY_LIMIT = "memory_limit"
    """The program ran out of its memory allowance (`MemoryError`, or killed by the OOM killer)."""
    OUTPUT_LIMIT = "output_limit"
    """The program wrote more than `Limits.output_bytes` to stdout or stderr and was killed."""
    KILLED = "killed"
    """The program died from a signal nobody in the sandbox sent on purpose (SIGSEGV, kill -9)."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox itself failed (a container gone, a supervisor that broke); the code may not
    have run."""
    ENGINE_LOST = "engine_lost"
    """The sandbox's engine (the Docker daemon) stopped answering, or restarted, before the run
    could finish: the code may not have run and its outcome is unknown. Not the code's doing;
    the backend reconnects (a new client, new containers) on a later run once the engine
    answers again."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one run.

    `timeout_s` is wall-clock time, enforced inside the sandbox with a hard kill. `memory_mb`
    caps the program's address space. `output_bytes` caps stdout and stderr each; a program
    that writes more is killed. `pids`, `cpus` and `disk_mb` (the size of the writable work
    dir) are fixed when a docker container is created, so per-run values of those are
    ignored by a warm pool: the pool's own `Limits` apply.
    """

    timeout_s: float = 10.0
    memory_mb: int = 512
    output_bytes: int = 1 * MiB
    pids: int = 64
    cpus: float = 1.0
    disk_mb: int = 64

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "output_bytes", "pids", "cpus", "disk_mb"):
            value = getattr(self, name)
            # Not NaN (false either way) nor infinity, which anyio's deadlines and docker's
            # options cannot take.
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"Limits.{name} must be positive and finite, got {value!r}")


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of one run. Failures of the code, and of the sandbox, are values here: `run`
    raises only for misuse (a closed sandbox) or cancellation. `sandbox_failed` tells the
    sandbox's failures (`sandbox_error`, `engine_lost`) from the code's."""

    status: ExecStatus
    exit_code: int | None = None
    """The program's exit status; negative for a signal (-9 for SIGKILL); None if it never ran."""
    stdout: str = ""
    stderr: str = ""
    """Captured output, at most `Limits.output_bytes` each, decoded as UTF-8 with replacement."""
    truncated: bool = False
    """True when stdout or stderr was cut at the cap."""
    duration_s: float = 0.0
    detail: str = field(default="")
    """Why the sandbox failed, for `sandbox_error` and `engine_lost`; empty otherwise."""

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK

    @property
    def sandbox_failed(self) -> bool:
        """The sandbox, not the code, decided this outcome (`sandbox_error`, `engine_lost`):
        it says nothing about the code."""
        return self.status in (ExecStatus.SANDBOX_ERROR, ExecStatus.ENGINE_LOST)


class SandboxError(AgentHubError):
    """The sandbox was misused (run after aclose) or could not be set up; also what a caller
    raises on a `sandbox_error` result when the run's outcome cannot stand in for the code's."""


class SandboxUnavailableError(SandboxError):
    """No isolating backend works on this machine (no Docker engine or image, no bubblewrap)."""


class SandboxEngineError(SandboxUnavailableError):
    """The sandbox's engine (the Docker daemon) does not answer: not running, restarting or
    hung. `connect` raises it; a caller raises it on an `engine_lost` result."""
