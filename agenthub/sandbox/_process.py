"""Backends that run the program as a local process: `bwrap` (isolated) and `unisolated`."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path, PurePosixPath

import anyio
from anyio.abc import ByteReceiveStream, Process

from agenthub.sandbox._base import Sandbox
from agenthub.sandbox._common import (
    MAIN,
    RawOutcome,
    as_bytes,
    classify,
    request_files,
    sandbox_error,
)
from agenthub.sandbox._types import ExecResult, Limits, SandboxError

__all__ = ["BwrapSandbox", "UnisolatedSandbox", "bwrap_problem"]

BOX = "/box"
BWRAP_UIDS = range(61000, 62000)
"""As root, each bwrap run takes an unprivileged uid of its own from here (`_uid_lease`), so
the process-count limit counts that run's processes only and the sweep after it kills nothing
else."""
# Once the program has exited, output still in the pipes is read for this long.
DRAIN_S = 0.5
_ENV = {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


class _ProcessSandbox(Sandbox):
    def __init__(self, *, limits: Limits | None = None, concurrency: int | None = None) -> None:
        self.limits = limits or Limits()
        self.concurrency = concurrency or max(2, min(8, os.cpu_count() or 2))
        self._free_slots = list(range(self.concurrency))
        self._slots: anyio.Semaphore | None = None
        self._closed = False

    async def run(
        self,
        code: str,
        *,
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecResult:
        if self._closed:
            raise SandboxError(f"this {type(self).__name__} is closed; open a new one")
        contents = request_files(code, files)
        if self._slots is None:
            self._slots = anyio.Semaphore(self.concurrency)
        async with self._slots:
            slot = self._free_slots.pop()
            try:
                return await self._run(slot, contents, as_bytes(stdin), limits or self.limits)
            finally:
                self._free_slots.append(slot)

    async def _run(
        self, slot: int, files: dict[str, bytes], stdin: bytes, limits: Limits
    ) -> ExecResult:
        raise NotImplementedError

    async def aclose(self) -> None:
        # Every run kills what it started before returning; nothing outlives a run.
        self._closed = True


class BwrapSandbox(_ProcessSandbox):
    """Runs each program under bubblewrap: fresh user, pid, network, ipc and uts namespaces
    (so no network at all), only `/usr` visible and read-only, a size-limited tmpfs work dir,
    and rlimits on address space and (as root) process count. When the program exits or is
    killed, the kernel kills everything left in its pid namespace.

    `concurrency` bounds how many programs run at once (default: one per core, 2 to 8).
    """

    name = "bwrap"

    async def _run(
        self, slot: int, files: dict[str, bytes], stdin: bytes, limits: Limits
    ) -> ExecResult:
        problem = bwrap_problem()
        if problem:
            return sandbox_error(problem)
        as_root = os.geteuid() == 0
        fds = [_memfd(name, data) for name, data in files.items()]
        stdin_fd = _memfd("stdin", stdin)
        try:
            command = _prlimit(limits, nproc=as_root) + _bwrap_argv(files, fds, limits)
            run = functools.partial(
                supervise, stdin_fd=stdin_fd, pass_fds=fds, limits=limits, cwd="/"
            )
            outcome = await (_as_own_user(run, command, slot) if as_root else run(command))
        except SandboxError as exc:  # no uid free, or the uids' lock directory is not ours
            return sandbox_error(str(exc))
        finally:
            for fd in [*fds, stdin_fd]:
                os.close(fd)
        return classify(outcome)


class UnisolatedSandbox(_ProcessSandbox):
    """Runs the program as a plain child process in a temporary directory, with only an
    address-space limit, a timeout and an output cap. It does NOT isolate anything: the code
    can read and write your files and use the network. `open_sandbox` never picks it unless
    asked by name; it exists for trusted code and as the baseline of benchmarks."""

    name = "unisolated"

    async def _run(
        self, slot: int, files: dict[str, bytes], stdin: bytes, limits: Limits
    ) -> ExecResult:
        work = Path(tempfile.mkdtemp(prefix="agenthub-run-"))
        stdin_fd = _memfd("stdin", stdin)
        try:
            for name, data in files.items():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_bytes(data)
            command = [*_prlimit(limits, nproc=False), _python(), MAIN]
            outcome = await supervise(
                command, stdin_fd=stdin_fd, pass_fds=(), limits=limits, cwd=str(work)
            )
        finally:
            os.close(stdin_fd)
            shutil.rmtree(work, ignore_errors=True)
        return classify(outcome)


async def supervise(
    command: Sequence[str],
    *,
    stdin_fd: int,
    pass_fds: Sequence[int],
    limits: Limits,
    cwd: str,
) -> RawOutcome:
    """Run `command` in a new session, cap its output, kill its whole process group at the
    deadline, when it floods its output, when it exits (left-behind children) and when this
    coroutine is cancelled."""
    start = time.monotonic()
    process = await anyio.open_process(
        list(command),
        stdin=stdin_fd,
        cwd=cwd,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", **_ENV},
        start_new_session=True,
        pass_fds=pass_fds,
    )
    flooded = anyio.Event()
    out, err = bytearray(), bytearray()
    try:
        async with anyio.create_task_group() as group:
            assert process.stdout is not None and process.stderr is not None
            pumps_done = [anyio.Event(), anyio.Event()]
            for stream, buffer, done in zip(
                (process.stdout, process.stderr), (out, err), pumps_done, strict=True
            ):
                group.start_soon(_pump, stream, buffer, limits.output_bytes, flooded, done)
            with anyio.move_on_after(limits.timeout_s) as deadline:
                async with anyio.create_task_group() as race:
                    race.start_soon(_cancel_when_set, flooded, race.cancel_scope)
                    await process.wait()
                    race.cancel_scope.cancel()
            duration = time.monotonic() - start
            _kill_group(process)
            with anyio.move_on_after(DRAIN_S):
                for done in pumps_done:
                    await done.wait()
            group.cancel_scope.cancel()
    finally:
        _kill_group(process)
        with anyio.CancelScope(shield=True):
            await process.aclose()
    return RawOutcome(
        exit_code=_exit_code(process),
        stdout=bytes(out),
        stderr=bytes(err),
        truncated=flooded.is_set(),
        timed_out=deadline.cancelled_caught and not flooded.is_set(),
        output_limit=flooded.is_set(),
        oom_killed=False,
        duration_s=duration,
    )


async def _pump(
    stream: ByteReceiveStream, buffer: bytearray, cap: int, flooded: anyio.Event, done: anyio.Event
) -> None:
    try:
        async for chunk in stream:
            room = cap - len(buffer)
            buffer += chunk[:room]
            if len(chunk) > room:
                flooded.set()
                return
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    finally:
        done.set()


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _as_own_user(
    run: Callable[[list[str]], Awaitable[RawOutcome]], command: list[str], slot: int
) -> RawOutcome:
    """`run(command)` as a uid of its own (`_uid_lease`), nothing of that uid running before
    it starts or once it ends."""
    with _uid_lease(BWRAP_UIDS.start + slot) as uid:
        try:
            await _kill_user(uid)  # left by a process that died holding the uid
            return await run(_as_user(uid) + command)
        finally:
            with anyio.CancelScope(shield=True):
                await _kill_user(uid)


@contextlib.contextmanager
def _uid_lease(first: int) -> Iterator[int]:
    """A uid from `BWRAP_UIDS` that no other run holds, trying `first` first, held by an
    exclusive lock on its file until the block ends. Slots alone are not enough: every
    sandbox in every process on the machine (two rollout workers, eval beside training) counts
    its slots from the same start, and one run's sweep of its uid would kill another's
    program. The kernel drops the lock when its holder dies, so a crash frees the uid."""
    for uid in [*range(first, BWRAP_UIDS.stop), *range(BWRAP_UIDS.start, first)]:
        fd = try_lock(uid)
        if fd is None:
            continue
        try:
            yield uid
        finally:
            os.close(fd)
        return
    raise SandboxError(
        f"all {len(BWRAP_UIDS)} bwrap sandbox uids ({BWRAP_UIDS.start}-{BWRAP_UIDS.stop - 1}) "
        f"are in use by runs on this machine; run fewer at once (`concurrency`)"
    )


def try_lock(uid: int) -> int | None:
    """A descriptor holding `uid`'s lock (closing it lets go), or None where a run holds it."""
    path = _lock_dir() / f"{uid}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


@cache
def _lock_dir() -> Path:
    # Root's own directory: the locks are only taken as root. /run is a tmpfs, emptied at boot,
    # which suits locks; where there is none, the temporary directory.
    base = Path("/run") if os.access("/run", os.W_OK) else Path(tempfile.gettempdir())
    path = base / "agenthub-bwrap-uids"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        owner = path.lstat().st_uid
    except OSError as exc:
        raise SandboxError(f"cannot make {path} for the bwrap uids' locks: {exc}") from exc
    if path.is_symlink() or owner != os.geteuid():
        raise SandboxError(f"{path} is not this user's own directory; remove it and try again")
    return path


async def _kill_user(uid: int) -> None:
    """Kill every live process of the run's own uid and wait until none is left: a pid
    namespace dies with its init, but the kernel tears a crowded one (a fork bomb) down
    asynchronously, and `run` promises that nothing is running once it returns."""
    for _ in range(500):
        pids = _live_processes(uid)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        await anyio.sleep(0.01)


def _live_processes(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            stat = Path(f"/proc/{entry}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(int(entry))
    return found


def _kill_group(process: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _exit_code(process: Process) -> int | None:
    code = process.returncode
    # bwrap reports a child killed by signal N as exit status 128 + N.
    if code is not None and 128 < code <= 128 + 64:
        return -(code - 128)
    return code


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name.replace("/", "_"), 0)  # no MFD_CLOEXEC: the child inherits it
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _as_user(uid: int) -> list[str]:
    """Run what follows as `uid` (its own group, no others). setpriv rather than
    `open_process(user=...)`: uvloop, the event loop of Ray's actors and of many harnesses,
    refuses those arguments, so the sandbox would fail on it."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def _prlimit(limits: Limits, *, nproc: bool) -> list[str]:
    memory = limits.memory_mb * 1024 * 1024
    argv = ["prlimit", f"--as={memory}", "--core=0"]
    if nproc:
        argv.append(f"--nproc={limits.pids}")
    return [*argv, "--"]


def _python() -> str:
    # The system interpreter (the only one bwrap's /usr holds), not a venv's or pyenv's shim.
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "python3"


def _bwrap_argv(files: dict[str, bytes], fds: list[int], limits: Limits) -> list[str]:
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    argv += ["--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(limits.disk_mb * 1024 * 1024), "--tmpfs", BOX]
    dirs = sorted({str(p) for name in files for p in PurePosixPath(name).parents if str(p) != "."})
    for d in dirs:
        argv += ["--dir", f"{BOX}/{d}"]
    for (name, _), fd in zip(files.items(), fds, strict=True):
        argv += ["--file", str(fd), f"{BOX}/{name}"]
    # The root bwrap builds is a tmpfs of its own: read-only, so only the sized work dir is
    # writable.
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", BOX, "--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin"]
    argv += ["--setenv", "HOME", BOX, "--setenv", "TMPDIR", BOX]
    for key, value in _ENV.items():
        argv += ["--setenv", key, value]
    return [*argv, "--", _python(), MAIN]


@cache
def bwrap_problem() -> str | None:
    """Why the bwrap backend cannot work here, or None if it can (checked once, by running
    bubblewrap with the same namespaces as a real run)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    if shutil.which("prlimit") is None:
        return "prlimit (util-linux) is not installed"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    probe = _bwrap_argv({}, [], Limits())
    probe[probe.index("--") + 1 :] = [_python(), "-c", "pass"]
    try:
        if os.geteuid() != 0:
            done = subprocess.run(probe, capture_output=True, timeout=30)
        else:
            with _uid_lease(BWRAP_UIDS.start) as uid:
                done = subprocess.run(_as_user(uid) + probe, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError, SandboxError) as exc:
        return f"bubblewrap could not run: {exc}"
    if done.returncode != 0:
        return (
            "bubblewrap cannot create its namespaces here (unprivileged user namespaces may be "
            f"disabled): {done.stderr.decode(errors='replace').strip()}"
        )
    return None
