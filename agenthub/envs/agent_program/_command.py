"""Running an agent program given as a command: a subprocess on the episode's base URL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

import anyio
from anyio.abc import ByteReceiveStream

__all__ = ["describe_failure", "run_command"]

_TAIL = 2000  # characters of stderr kept in the episode's error


async def run_command(
    argv: list[str], task_json: str, base_url: str, budget_s: float
) -> tuple[int | None, str, str]:
    """Run `argv` with `OPENAI_BASE_URL=base_url`, `OPENAI_API_KEY` set and `task_json` on its
    stdin; returns its exit status (None when it ran past `budget_s` and its process group was
    killed), its stdout and the tail of its stderr."""
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "agenthub"}
    process = await anyio.open_process(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group, so an overrun kills its children too
    )
    out: list[bytes] = []
    err: list[bytes] = []
    status: int | None = None
    try:
        with anyio.move_on_after(budget_s):
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read, process.stdout, out)
                tg.start_soon(_read, process.stderr, err)
                assert process.stdin is not None
                try:
                    await process.stdin.send(task_json.encode())
                    await process.stdin.aclose()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass  # it exited without reading its task; its status says why
                status = await process.wait()
    finally:
        if process.returncode is None:
            _kill_group(process.pid)
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()
    stderr = b"".join(err).decode(errors="replace")
    return status, b"".join(out).decode(errors="replace"), stderr[-_TAIL:]


async def _read(stream: ByteReceiveStream | None, into: list[bytes]) -> None:
    assert stream is not None
    async for chunk in stream:
        into.append(chunk)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def describe_failure(argv: list[str], status: int | None, budget_s: float, stderr: str) -> str:
    """What went wrong with the command, for the episode's `env_error`."""
    shown = " ".join(argv)
    if status is None:
        head = (
            f"the agent command `{shown}` ran past its budget of {budget_s} s (budget_s) and its "
            "process group was killed; give it a larger budget_s or make it finish sooner"
        )
    else:
        head = (
            f"the agent command `{shown}` exited with status {status}; fix the program (its "
            "stderr is below) and print the result on stdout"
        )
    tail = stderr.strip()
    return f"{head}\nstderr (last {_TAIL} characters):\n{tail}" if tail else f"{head} (no stderr)"
